// A filter registered on the EntityManager (`em.addFilter`, MikroORM's API for a filter of one context) applies
// to `em.findOne` in every fork of it: a timer's delivery must not see a saga that filter hides, with or without
// the timer batch read (src/saga/unit-of-work/saga-preload.ts).
import { defineEntity } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, SagaTimer, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { DIALECTS } from '../support/databases.js';
import { LOADED_ORM_MAJOR } from '../support/orm-leg.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class ArchivableSaga extends SagaState {
  key!: string;
  archived: boolean = false;
  ticks: number = 0;
}

const ArchivableSagaSchema = defineEntity({
  class: ArchivableSaga,
  extends: SagaStateSchema,
  tableName: 'em_filtered_preload_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    archived: { type: 'boolean', fieldName: 'archived' },
    ticks: { type: 'integer', fieldName: 'ticks' },
  },
});

const archivableSaga = defineSaga<ArchivableSaga, { readonly type: 'Start'; readonly key: string } | { readonly type: 'Tick' }>({
  name: 'em-filtered-preload',
  state: ArchivableSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(_saga, _message, ctx) {
      ctx.schedule('tick', 0, { type: 'Tick' });
    },
    Tick(saga) {
      saga.ticks++;
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`timer batch preload and an EntityManager's own filter (${dialect})`, () => {
    const db = useDatabase(dialect, [ArchivableSagaSchema]);
    const dispatchers: SagaDispatcher[] = [];
    afterEach(async () => {
      await Promise.all(
        dispatchers
          .splice(0)
          .filter((d) => d.running)
          .map((d) => d.stop()),
      );
    });

    it('a saga hidden by em.addFilter is not delivered its timer (em.findOne does not find it)', async () => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const em = db().orm.em.fork();
      // MikroORM 6 takes (name, cond, entity), 7 one options object.
      const addFilter = em.addFilter.bind(em) as unknown as (...args: unknown[]) => void;
      if (LOADED_ORM_MAJOR === 6) addFilter('active', { archived: false }, ArchivableSaga);
      else addFilter({ name: 'active', cond: { archived: false }, entity: ArchivableSaga });
      const clock = new FakeClock('2026-02-02T10:00:00.000Z');
      const runtime = new SagaRuntime({ em, sagas: [archivableSaga], clock });
      const key = uniqueKey('em-filtered');
      const { sagaId } = await runtime.handle(archivableSaga, { type: 'Start', key });
      await db().orm.em.fork().nativeUpdate(ArchivableSaga, { id: sagaId! }, { archived: true });
      // What a unit of work's own read sees: nothing.
      expect(await em.fork({ clear: true }).findOne(ArchivableSaga, { id: sagaId! })).toBeNull();
      clock.advance({ seconds: 1 });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger });
      dispatchers.push(dispatcher);

      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 0 });

      const row = await db().orm.em.fork().findOneOrFail(ArchivableSaga, { id: sagaId! });
      expect(row).toMatchObject({ archived: true, ticks: 0, version: 0 });
      expect((await db().orm.em.fork().find(SagaTimer, { sagaId: sagaId! }))[0]).toMatchObject({ outcome: 'discarded' });
    });
  });
}
