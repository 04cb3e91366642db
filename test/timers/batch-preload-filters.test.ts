// Filters and the timer batch read (src/saga/unit-of-work/saga-preload.ts, timers/batch-preload.test.ts): a timer's
// delivery sees its saga as `em.findOne` would, whether or not the saga was read with its batch. A filter registered on
// the EntityManager (`em.addFilter`) applies in every fork of it, so a saga it hides is not delivered its timer; the
// filter of a to-one relation's target (`autoJoinRefsForFilters`) makes the step read that relation as null.
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

class Account {
  id!: number;
  closed: boolean = false;
}

const AccountSchema = defineEntity({
  class: Account,
  tableName: 'preload_relation_account',
  filters: { open: { name: 'open', cond: { closed: false }, default: true } },
  properties: {
    id: { type: 'integer', primary: true },
    closed: { type: 'boolean' },
  },
});

class AccountSaga extends SagaState {
  key!: string;
  account: Account | null = null;
  seen: string | null = null;
}

const AccountSagaSchema = defineEntity({
  class: AccountSaga,
  extends: SagaStateSchema,
  tableName: 'preload_relation_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    account: { kind: 'm:1', entity: () => Account, nullable: true } as never,
    seen: { type: 'string', fieldName: 'seen', nullable: true },
  },
});

type AccountMessage = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Look' };

const accountSaga = defineSaga<AccountSaga, AccountMessage>({
  name: 'preload-relation-filter',
  state: AccountSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(_saga, _message, ctx) {
      ctx.schedule('look', 0, { type: 'Look' });
    },
    // Records what the step saw of its relation.
    Look(saga) {
      saga.seen = saga.account ? `account ${saga.account.id}` : 'no account';
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`timer batch preload and filters (${dialect})`, () => {
    const db = useDatabase(dialect, [ArchivableSagaSchema, AccountSagaSchema, AccountSchema]);
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

    it('a step sees a relation to a filtered-out row as em.findOne shows it (null), through the dispatcher', async () => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const clock = new FakeClock('2026-02-02T10:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [accountSaga], clock });
      const key = uniqueKey('relation');
      const { sagaId } = await runtime.handle(accountSaga, { type: 'Start', key });
      const accountId = Math.floor(Math.random() * 1_000_000_000);
      const em = db().orm.em.fork();
      await em.insert(Account, { id: accountId, closed: true });
      await em.nativeUpdate(AccountSaga, { id: sagaId! }, { account: accountId } as never);
      // What em.findOne gives a unit of work: the closed account is filtered out of the relation.
      expect((await db().orm.em.fork({ clear: true }).findOneOrFail(AccountSaga, { id: sagaId! })).account).toBeNull();
      clock.advance({ seconds: 1 });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger });
      dispatchers.push(dispatcher);

      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1 });

      const row = await db().orm.em.fork({ clear: true }).findOneOrFail(AccountSaga, { id: sagaId! }, { filters: false });
      expect(row.seen).toBe('no account');
    });
  });
}
