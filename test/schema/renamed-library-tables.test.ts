// The library's statements read every table and column name from MikroORM's metadata (the database context), so an
// app that maps the library's tables under other names (here MikroORM's `discovery.onMetadata` hook, renaming the
// tables and a few columns, and the database's tables renamed to match) has every statement of the runtime, the
// dispatcher and the operations reach them. The tables' old names no longer exist: a statement that typed one fails.
import type { EntityMetadata, MikroORM } from '@mikro-orm/core';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  DISPATCH_TABLES,
  DispatchRecord,
  SagaDispatcher,
  SagaHandledMessage,
  SagaOutbox,
  SagaRuntime,
  SagaTimer,
  silentLogger,
} from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { queryRows } from '../../src/orm/sql-execution.js';
import { claimDueRows } from '../../src/sql/claim-statements.js';
import { releaseClaim, renewLeases } from '../../src/sql/delivery-statements.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS, type DialectName, isSqlite } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const TABLES: Readonly<Record<string, string>> = {
  saga_timer: 'app_timer',
  saga_outbox: 'app_outbox',
  saga_handled_message: 'app_handled_message',
};
/** Columns renamed in every library table that has them: one of each statement's keys, the pending flag, the message id. */
const COLUMNS: Readonly<Record<string, string>> = { saga_type: 'kind_of_saga', dispatched_at: 'done_at', message_id: 'msg_id' };
const LIBRARY_CLASSES: readonly unknown[] = [DispatchRecord, SagaTimer, SagaOutbox, SagaHandledMessage];

/** MikroORM's `discovery.onMetadata`: the library's tables and columns under the names above. */
function renameLibraryTables(meta: EntityMetadata): void {
  if (!LIBRARY_CLASSES.includes(meta.class)) return;
  if (meta.tableName && TABLES[meta.tableName]) meta.tableName = TABLES[meta.tableName]!;
  for (const property of Object.values(meta.properties)) {
    const renamed = COLUMNS[(property as { fieldName?: string }).fieldName ?? property.fieldNames?.[0] ?? ''];
    if (!renamed) continue;
    (property as { fieldName?: string }).fieldName = renamed;
    property.fieldNames = [renamed];
  }
}

/** Renames the migrated tables and columns to the names the hook gives them (indexes follow, on both databases). */
async function renameInDatabase(orm: MikroORM, dialect: DialectName): Promise<void> {
  const connection = orm.em.getConnection();
  for (const [from, to] of Object.entries(TABLES)) {
    await connection.execute(`alter table "${from}" rename to "${to}"`);
    const columns = await columnsOf(orm, dialect, to);
    for (const [column, renamed] of Object.entries(COLUMNS)) {
      if (columns.includes(column)) await connection.execute(`alter table "${to}" rename column "${column}" to "${renamed}"`);
    }
  }
}

async function columnsOf(orm: MikroORM, dialect: DialectName, table: string): Promise<string[]> {
  const sql = isSqlite(dialect)
    ? 'select name from pragma_table_info(?)'
    : 'select column_name as name from information_schema.columns where table_schema = current_schema() and table_name = ?';
  return (await queryRows<{ name: string }>(orm.em.fork(), sql, [table])).map((row) => row.name);
}

for (const dialect of DIALECTS) {
  describe(`the library's tables and columns under other names (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    let orm: MikroORM;
    let clock: FakeClock;
    let runtime: SagaRuntime;
    let ops: SagaOperations;
    const dispatcher = (options: Partial<ConstructorParameters<typeof SagaDispatcher>[0]> = {}) =>
      new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        // The schema check compares the library's index definitions, which its mappings write with the default
        // names: it does not apply to tables renamed this way.
        verifySchema: false,
        maxAttempts: 2,
        backoff: { baseMs: 1_000, maxMs: 1_000, jitter: false },
        publish: async (envelope) => {
          if (envelope.type === 'Refused') throw new Error('broker refused');
        },
        ...options,
      });

    beforeAll(async () => {
      await renameInDatabase(db().orm, dialect);
      orm = await db().openAnother({ discovery: { onMetadata: renameLibraryTables } });
      clock = new FakeClock('2026-03-02T09:00:00Z');
      runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock, verifySchema: false });
      ops = new SagaOperations({ runtime });
    });

    it('reads the names the app mapped, and the old tables are gone', async () => {
      expect(runtime.context.tables.timer.name).toBe('app_timer');
      expect(runtime.context.tables.handledMessage.field.messageId).toBe('msg_id');
      for (const table of Object.keys(TABLES)) {
        await expect(queryRows(orm.em.fork(), `select 1 from "${table}"`, [])).rejects.toThrow();
      }
    });

    it('a unit of work writes its timers, outbox rows and message id there; a redelivery and a replacement find them', async () => {
      const key = uniqueKey('renamed');
      const started = await runtime.handle(
        scriptedSaga,
        {
          type: 'Start',
          key,
          actions: [
            { op: 'schedule', name: 'soon', after: 1_000 },
            { op: 'schedule', name: 'later', after: { days: 30 } },
            { op: 'send', message: { type: 'Hello' } },
          ],
        },
        { messageId: `${key}-1` },
      );
      expect(started).toMatchObject({ outcome: 'started', timersScheduled: 2, messagesSent: 1 });
      const again = await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-1` });
      expect(again.outcome).toBe('duplicate');
      // Replaces one pending timer in place and cancels another: several timer rows, locked first on PostgreSQL.
      const changed = await runtime.handle(scriptedSaga, {
        type: 'Do',
        key,
        actions: [
          { op: 'schedule', name: 'soon', after: 2_000 },
          { op: 'cancel', name: 'later' },
        ],
      });
      expect(changed).toMatchObject({ outcome: 'handled', timersScheduled: 1, timersCancelled: 1 });
      const rows = rowsOf(orm);
      expect((await rows.pendingTimers(started.sagaId!)).map((t) => [t.name, t.sagaType])).toEqual([['soon', 'scripted']]);
      expect((await rows.outbox(started.sagaId!)).map((o) => o.messageType)).toEqual(['Hello']);
      expect((await rows.handledMessages(started.sagaId!)).map((m) => m.messageId)).toEqual([`${key}-1`]);
    });

    // Each test reads back the rows of its own saga: the rows earlier tests left are dispatched along with them.
    it('the dispatcher claims, fires, publishes, dead-letters and catches up rows there', async () => {
      const key = uniqueKey('dispatched');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [
          { op: 'schedule', name: 'tick', after: 1_000 },
          { op: 'schedule', name: 'overdue', after: 5_000, scope: 'saga' },
          { op: 'send', message: { type: 'Hello' } },
          { op: 'send', message: { type: 'Refused' } },
        ],
      });
      clock.advance(1_000);
      await drainDueTimers(dispatcher());
      // The refused message's second attempt, after its backoff, is its last.
      clock.advance(1_000);
      await dispatcher().runOnce();
      clock.advance({ days: 2 });
      await dispatcher({ catchUp: { policy: 'skip-beyond-max-age', maxAgeMs: 60_000 } }).runOnce();
      const rows = rowsOf(orm);
      expect((await rows.timers({ sagaId })).map((t) => [t.name, t.outcome])).toEqual([
        ['overdue', 'missed'],
        ['tick', 'fired'],
      ]);
      expect((await rows.outbox(sagaId!)).map((o) => [o.messageType, o.outcome])).toEqual([
        ['Hello', 'published'],
        ['Refused', 'dead_lettered'],
      ]);
      expect((await rows.saga(key))?.log).toBe('started;tick:tick;');
    });

    it('a claim, its lease renewal and its release reach the rows there', async () => {
      const key = uniqueKey('leased');
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'held', after: 1_000 }] });
      clock.advance(1_000);
      const now = clock.now();
      const rows = await claimDueRows(runtime.context, DISPATCH_TABLES.timer, now, new Date(now.getTime() + 60_000), 10);
      const claimed = rows.find((row) => row.name === 'held');
      const claim = { id: String(claimed!.id), token: String(claimed!.token) };
      expect((await renewLeases(runtime.context, DISPATCH_TABLES.timer, [claim], new Date(now.getTime() + 120_000))).written).toEqual([
        claim.id,
      ]);
      expect(await releaseClaim(runtime.context, DISPATCH_TABLES.timer, claim)).toBe(1);
      expect((await rowsOf(orm).timers({ id: claim.id }))[0]).toMatchObject({ lockedUntil: null, dispatchedAt: null });
    });

    it('the operations list, change and purge rows there', async () => {
      const key = uniqueKey('operated');
      const { sagaId } = await runtime.handle(
        scriptedSaga,
        {
          type: 'Start',
          key,
          actions: [
            { op: 'schedule', name: 'moved', after: { days: 1 } },
            { op: 'schedule', name: 'dropped', after: { days: 1 } },
            { op: 'send', message: { type: 'Flaky' } },
          ],
        },
        { messageId: `${key}-m` },
      );
      const refusing = dispatcher({ publish: async () => Promise.reject(new Error('broker down')) });
      await refusing.runOnce();
      clock.advance(1_000);
      await refusing.runOnce();
      const [dead] = (await ops.listOutbox({ sagaId: sagaId!, status: 'dead_lettered', limit: 10 })).items;
      expect(await ops.requeueOutbox([dead!.id])).toMatchObject({ affected: 1 });
      const timers = (await ops.listTimers({ sagaId: sagaId!, status: 'pending', limit: 10 })).items;
      const id = (name: string) => timers.find((t) => t.name === name)!.id;
      expect(await ops.rescheduleTimers([id('moved')], new Date(clock.now().getTime() + 5_000))).toMatchObject({ affected: 1 });
      expect(await ops.cancelTimers([id('dropped')])).toMatchObject({ affected: 1 });
      expect(await ops.getSaga({ sagaType: 'scripted', sagaId: sagaId! })).toMatchObject({
        pendingTimers: [{ name: 'moved' }],
        messageIds: [{ messageId: `${key}-m` }],
      });
      expect(await ops.forceComplete({ sagaType: 'scripted', sagaId: sagaId!, reason: 'renamed tables' })).toMatchObject({
        timersCancelled: 1,
      });
      await dispatcher().runOnce();
      clock.advance({ days: 30 });
      const purged = await ops.purge({ dispatchedBefore: clock.now(), completedSagasBefore: clock.now(), expiredMessageIds: true });
      expect(purged.sagas).toMatchObject({ scripted: expect.any(Number) });
      const rows = rowsOf(orm);
      expect([
        await rows.saga(key),
        await rows.timers({ sagaId }),
        await rows.outbox(sagaId!),
        await rows.handledMessages(sagaId!),
      ]).toEqual([null, [], [], []]);
    });
  });
}
