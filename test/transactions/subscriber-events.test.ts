// A unit of work opens its transaction through the library's compat layer (on MikroORM 6 without a knex transaction
// object of its own). What an application's MikroORM subscribers see must be what em.begin()/em.commit() give them:
// the six transaction events in order, with the unit's EntityManager, statements that run inside the transaction
// (nested em.transactional() as a savepoint), and a kept transaction context that can no longer write once it ended.
import type { EntityManager, EventSubscriber, MikroORM, TransactionEventArgs } from '@mikro-orm/core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { executeSql, queryRows } from '../../src/orm/sql-execution.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

type TransactionEvent =
  | 'beforeTransactionStart'
  | 'afterTransactionStart'
  | 'beforeTransactionCommit'
  | 'afterTransactionCommit'
  | 'beforeTransactionRollback'
  | 'afterTransactionRollback';

/** Records every transaction event; `onBeforeCommit` runs inside the transaction, before COMMIT. */
class TransactionRecorder implements EventSubscriber {
  readonly events: { event: TransactionEvent; em: EntityManager | undefined; transaction: unknown }[] = [];
  onBeforeCommit: ((args: TransactionEventArgs) => Promise<void>) | undefined;
  private record(event: TransactionEvent, args: TransactionEventArgs): void {
    this.events.push({ event, em: args.em, transaction: args.transaction });
  }
  beforeTransactionStart(args: TransactionEventArgs): void {
    this.record('beforeTransactionStart', args);
  }
  afterTransactionStart(args: TransactionEventArgs): void {
    this.record('afterTransactionStart', args);
  }
  async beforeTransactionCommit(args: TransactionEventArgs): Promise<void> {
    this.record('beforeTransactionCommit', args);
    await this.onBeforeCommit?.(args);
  }
  afterTransactionCommit(args: TransactionEventArgs): void {
    this.record('afterTransactionCommit', args);
  }
  beforeTransactionRollback(args: TransactionEventArgs): void {
    this.record('beforeTransactionRollback', args);
  }
  afterTransactionRollback(args: TransactionEventArgs): void {
    this.record('afterTransactionRollback', args);
  }
  names(): TransactionEvent[] {
    return this.events.map((e) => e.event);
  }
}

const COMMITTED: TransactionEvent[] = [
  'beforeTransactionStart',
  'afterTransactionStart',
  'beforeTransactionCommit',
  'afterTransactionCommit',
];
const ROLLED_BACK: TransactionEvent[] = [
  'beforeTransactionStart',
  'afterTransactionStart',
  'beforeTransactionCommit',
  'beforeTransactionRollback',
  'afterTransactionRollback',
];

for (const dialect of DIALECTS) {
  describe(`a unit of work's transaction as MikroORM subscribers see it (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    beforeAll(async () => {
      await executeSql(db().orm.em, 'create table tx_audit (note varchar(100) not null)', [], 'run');
    });
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    async function setUp(groupCommit?: false) {
      const orm = await db().openAnother();
      opened.push(orm);
      const recorder = new TransactionRecorder();
      orm.em.getEventManager().registerSubscriber(recorder);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], ...(groupCommit === false ? { groupCommit } : {}) });
      return { orm, recorder, runtime };
    }

    const audited = async (note: string) =>
      (await queryRows<{ note: string }>(db().orm.em.fork(), 'select note from tx_audit where note like ?', [`${note}%`]))
        .map((row) => row.note)
        .sort();

    for (const groupCommit of [undefined, false] as const) {
      it(`fires the four events of a committed transaction, in order, with the unit's own fork (groupCommit ${String(groupCommit)})`, async () => {
        const { orm, recorder, runtime } = await setUp(groupCommit);
        const key = uniqueKey('events');
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
        expect(recorder.names()).toEqual(COMMITTED);
        const ems = new Set(recorder.events.map((e) => e.em));
        expect(ems.size).toBe(1);
        expect([...ems][0]).not.toBe(orm.em);
        for (const { event, transaction } of recorder.events.slice(1)) expect(transaction, event).toBeDefined();
        expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1 });
      });
    }

    it("runs a subscriber's statements in the transaction: written with the unit, rolled back with it", async () => {
      const { recorder, runtime } = await setUp();
      const key = uniqueKey('audit');
      let failCommit = false;
      recorder.onBeforeCommit = async ({ em }) => {
        await executeSql(em!, 'insert into tx_audit (note) values (?)', [`${key}-${failCommit ? 'failed' : 'ok'}`], 'run');
        if (failCommit) throw new Error('audit refused');
      };
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
      expect(await audited(key)).toEqual([`${key}-ok`]);

      failCommit = true;
      recorder.events.length = 0;
      const error = (await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).then(
        () => undefined,
        (e: unknown) => e,
      )) as (Error & { code?: string; details?: Record<string, unknown> }) | undefined;
      // COMMIT was never sent: nothing of the unit, the subscriber's insert included, was written.
      expect(error?.code).toBe('PERSISTENCE_FAILED');
      expect(error?.message).toMatch(/beforeTransactionCommit subscriber threw Error, so COMMIT was not sent/);
      expect(error?.message).toMatch(/nothing of it was written/);
      expect(error?.message).not.toMatch(/audit refused/);
      expect(recorder.names()).toEqual(ROLLED_BACK);
      expect(await audited(key)).toEqual([`${key}-ok`]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 0 });

      failCommit = false;
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 1 });
    });

    it("runs a subscriber's nested em.transactional() as a savepoint of the unit's transaction", async () => {
      const { recorder, runtime } = await setUp();
      const key = uniqueKey('nested');
      // MikroORM 7 fires the transaction events for nested transactions too: the subscriber acts once, for the unit.
      let nesting = false;
      recorder.onBeforeCommit = async ({ em }) => {
        if (nesting) return;
        nesting = true;
        try {
          await em!.transactional((tx) => executeSql(tx, 'insert into tx_audit (note) values (?)', [`${key}-kept`], 'run'));
          await em!
            .transactional(async (tx) => {
              await executeSql(tx, 'insert into tx_audit (note) values (?)', [`${key}-undone`], 'run');
              throw new Error('nested work refused');
            })
            .catch(() => undefined);
        } finally {
          nesting = false;
        }
      };
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
      const unit = recorder.events[0]!.em;
      expect(recorder.events.filter((e) => e.em === unit).map((e) => e.event)).toEqual(COMMITTED);
      expect(await audited(key)).toEqual([`${key}-kept`]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1 });
    });

    it('refuses a statement through a transaction context kept after its unit committed', async () => {
      const { orm, recorder, runtime } = await setUp();
      const key = uniqueKey('kept');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const kept = recorder.events.find((e) => e.event === 'beforeTransactionCommit')!.transaction;
      const stale = orm.em.fork();
      stale.setTransactionContext(kept as never);
      await expect(executeSql(stale, 'insert into tx_audit (note) values (?)', [`${key}-late`], 'run')).rejects.toThrow(
        /transaction|closed|completed|ended/i,
      );
      expect(await audited(key)).toEqual([]);
      // The connection it held went back to the pool in working order.
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1 });
    });
  });
}
