// MikroORM's flush dispatches beforeFlush, onFlush and afterFlush to every subscriber that has the method, whatever
// entities its getSubscribedEntities names (a flush event has no entity; EventManager.dispatchEvent). The direct
// UPDATE asked EventManager.hasListeners, which counts only subscribers of the saga entity or of every entity:
// a flush subscriber scoped to another entity of the app never saw the saga's change set (onFlush), and a
// beforeFlush that changed the saga made the commit's flush write a second UPDATE that failed the version check.
import { defineEntity, EntitySchema, type EventSubscriber, type FlushEventArgs } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

class Ledger {
  id!: number;
}
const LedgerSchema = new EntitySchema<Ledger>({
  class: Ledger,
  tableName: 'flush_watch_ledger',
  properties: { id: { type: 'integer', primary: true } },
});

class ScopedSaga extends SagaState {
  key!: string;
  count: number = 0;
  note: string | null = null;
}

const ScopedSagaSchema = defineEntity({
  class: ScopedSaga,
  extends: SagaStateSchema,
  tableName: 'scoped_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    note: { type: 'text', fieldName: 'note', nullable: true },
  },
});

type Message = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string };
const scopedSaga = defineSaga<ScopedSaga, Message>({
  name: 'scoped',
  state: ScopedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
    },
  },
});

/** Scoped to Ledger, as its entity events go; MikroORM still calls its flush events for every flush. */
class LedgerFlushes implements EventSubscriber<Ledger> {
  readonly seen: string[] = [];
  getSubscribedEntities() {
    return [Ledger];
  }
  async onFlush(args: FlushEventArgs): Promise<void> {
    for (const cs of args.uow.getChangeSets()) this.seen.push(`${cs.type} ${cs.meta.className}`);
  }
}

/** Scoped to Ledger; stamps every saga of the flush before MikroORM computes its change sets. */
class StampBeforeFlush implements EventSubscriber<Ledger> {
  getSubscribedEntities() {
    return [Ledger];
  }
  async beforeFlush(args: FlushEventArgs): Promise<void> {
    for (const entity of args.uow.getIdentityMap()) {
      if (entity instanceof ScopedSaga && entity.count > 0) entity.note = `stamped ${entity.count}`;
    }
  }
}

for (const dialect of DIALECTS) {
  describe(`flush subscribers scoped to another entity and the direct UPDATE (${dialect})`, () => {
    const db = useDatabase(dialect, [LedgerSchema, ScopedSagaSchema]);

    it("onFlush of a subscriber scoped to another entity sees the saga's update, as in MikroORM's flush", async () => {
      const em = db().orm.em.fork({ freshEventManager: true });
      const watcher = new LedgerFlushes();
      em.getEventManager().registerSubscriber(watcher);
      const runtime = new SagaRuntime({ em, sagas: [scopedSaga] });
      const key = uniqueKey('onflush');
      await runtime.handle(scopedSaga, { type: 'Start', key });
      watcher.seen.length = 0;
      expect(await runtime.handle(scopedSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(watcher.seen).toContain('update ScopedSaga');
    });

    it('beforeFlush of a subscriber scoped to another entity changes the saga, and the unit commits it', async () => {
      const em = db().orm.em.fork({ freshEventManager: true });
      em.getEventManager().registerSubscriber(new StampBeforeFlush());
      const runtime = new SagaRuntime({ em, sagas: [scopedSaga] });
      const key = uniqueKey('beforeflush');
      await runtime.handle(scopedSaga, { type: 'Start', key });
      expect(await runtime.handle(scopedSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await db().orm.em.fork().findOneOrFail(ScopedSaga, { key })).toMatchObject({ count: 1, note: 'stamped 1', version: 1 });
    });
  });
}
