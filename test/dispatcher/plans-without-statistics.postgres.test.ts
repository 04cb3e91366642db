// Dispatch statements on PostgreSQL keep their plans whatever the statistics say. A table just filled has none yet
// (autovacuum analyzes it later), or statistics from before a burst (the recovery after an outage), and PostgreSQL
// then believes few rows are pending.
// A claim takes the oldest due rows (`order by available_at, id limit n for update skip locked`), which the claim
// index gives in that order; believing few rows pending, PostgreSQL read every pending row and sorted them all under
// the lock, on every claim (a claim of 100 among 20,000 pending: 30 ms). The claim is planned with sorting off
// (`DialectAdapter.claimSettings`): it reads the claim index in order and stops after its batch. The plans are read
// by replaying what the claim sent as EXPLAIN ANALYZE, in a transaction that is rolled back.
// The statements that find rows by id (start marks, lease renewals, published stamps, releases, failures, dead
// letters, the operator's timer commands) look them up by primary key, never through the claim index (which looks
// tiny then) nor by reading the whole table; saga_inbox's by its unique index on id (its primary key is its order key). Their plans are read with EXPLAIN, which runs nothing.
import type { MikroORM } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { executeSql, queryRows } from '../../src/orm/sql-execution.js';
import { claimDueRows } from '../../src/sql/claim-statements.js';
import {
  deadLetter,
  markDeliveriesStarted,
  markPublished,
  recordFailure,
  releaseClaim,
  renewLeases,
} from '../../src/sql/delivery-statements.js';
import { type Claim, DISPATCH_TABLES, type DispatchTable } from '../../src/sql/dispatch-tables.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { useDatabase } from '../support/suite.js';

/** Pending rows per table: a backlog whose full sort is unmistakable in the plan. */
const PENDING = 20_000;
/** Rows already dispatched, analyzed before the burst of pending rows arrives. */
const HISTORY = 20_000;
const BATCH = 100;

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Actual Rows': number;
  readonly 'Actual Loops': number;
  readonly 'Index Name'?: string;
  readonly Plans?: readonly PlanNode[];
}

/** Every node of `plan`, its subplans and CTEs included. */
function nodesOf(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodesOf)];
}

const SEED = {
  saga_outbox: (dispatched: boolean) =>
    `insert into saga_outbox (id, saga_type, saga_id, message_type, payload, headers, available_at, token, attempts, created_at, dispatched_at, outcome)
     select gen_random_uuid(), 'scripted', gen_random_uuid(), 'Relayed', '{"type":"Relayed"}', '{}', ?::timestamptz + i * interval '1 ms',
       gen_random_uuid(), 0, ?, ${dispatched ? `?, 'published'` : 'null, null'}
     from generate_series(1, ?) as i returning 1`,
  saga_timer: (dispatched: boolean) =>
    `insert into saga_timer (id, saga_type, saga_id, name, due_at, available_at, message_type, payload, token, attempts, created_at, dispatched_at, outcome)
     select gen_random_uuid(), 'scripted', gen_random_uuid(), 'tick', ?::timestamptz + i * interval '1 ms', ?::timestamptz + i * interval '1 ms',
       'Tick', '{"type":"Tick"}', gen_random_uuid(), 0, ?, ${dispatched ? `?, 'fired'` : 'null, null'}
     from generate_series(1, ?) as i returning 1`,
  // Each row a saga of its own: every pending row is the first of its saga, and so due.
  saga_inbox: (dispatched: boolean) =>
    `insert into saga_inbox (id, saga_type, saga_key, message_type, payload, available_at, token, attempts, created_at, dispatched_at, outcome)
     select gen_random_uuid(), 'scripted', gen_random_uuid()::text, 'Relayed', '{"type":"Relayed"}', ?::timestamptz + i * interval '1 ms',
       gen_random_uuid(), 0, ?, ${dispatched ? `?, 'delivered'` : 'null, null'}
     from generate_series(1, ?) as i returning 1`,
} as const;

/** Inserts `count` rows into `table`, available from `from` on, 1 ms apart; `dispatched` rows are history. */
async function seed(orm: MikroORM, table: DispatchTable, from: Date, count: number, dispatched: boolean): Promise<void> {
  const times = table === DISPATCH_TABLES.timer ? [from, from, from] : [from, from];
  await queryRows(orm.em.fork(), SEED[table](dispatched), [...times, ...(dispatched ? [from] : []), count]);
}

for (const scenario of ['never analyzed', 'analyzed before a burst'] as const) {
  describe(`a claim on a table whose statistics say few rows are pending: ${scenario} (postgresql)`, () => {
    // A database of its own: statistics outlive the rows.
    const db = useDatabase('postgresql', [ScriptedSaga]);

    it('reads the claim index in order and stops after its batch', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const now = clock.now();
      const tables = Object.values(DISPATCH_TABLES) as DispatchTable[];
      for (const table of tables) {
        // Autovacuum would analyze the rows seeded here on its own schedule: the statistics are the test's to set.
        await queryRows(db().orm.em.fork(), `alter table ${table} set (autovacuum_enabled = false)`, []);
        if (scenario === 'analyzed before a burst') {
          await seed(db().orm, table, new Date(now.getTime() - 7_200_000), HISTORY, true);
          await queryRows(db().orm.em.fork(), `analyze ${table}`, []);
        }
        await seed(db().orm, table, new Date(now.getTime() - 3_600_000), PENDING, false);
      }
      // What PostgreSQL believes: no statistics, or statistics that say no row is pending.
      const stats = await queryRows<{ tablename: string; null_frac: number }>(
        db().orm.em.fork(),
        `select tablename, null_frac from pg_stats where tablename in ('saga_outbox', 'saga_timer', 'saga_inbox') and attname = 'dispatched_at'`,
        [],
      );
      expect(stats.map((s) => s.null_frac)).toEqual(scenario === 'never analyzed' ? [] : [0, 0, 0]);
      const [server] = await queryRows<{ jit: string }>(db().orm.em.fork(), `select current_setting('jit') as "jit"`, []);

      const sent: { readonly sql: string; readonly params: readonly unknown[] }[] = [];
      // One connection: the settings check below reads the connection the claims ran on, and on MikroORM 7, where the
      // settings and the claim are statements of their own, a claim sent on another connection than its settings
      // would wait for the one the library holds, for ever, instead of passing.
      const orm = await db().openAnother({
        pool: { min: 1, max: 1 },
        onQuery: (sql: string, params: readonly unknown[]) => {
          sent.push({ sql, params: [...params] });
          return sql;
        },
      });
      const { context } = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const leaseUntil = new Date(now.getTime() + 30_000);
      for (const table of tables) {
        const oldest = await queryRows<{ id: string }>(
          orm.em.fork(),
          `select id from ${table} where dispatched_at is null order by available_at, id limit ?`,
          [BATCH],
        );
        const from = sent.length;
        const startAtClaim = table === DISPATCH_TABLES.outbox ? { upTo: BATCH, maxAttempts: 10 } : undefined;
        const claimed = await claimDueRows(context, table, now, leaseUntil, BATCH, { startedBefore: now }, startAtClaim);
        // Sorting off changes how the rows are found, not which: the oldest, by availability then id.
        expect(claimed.map((row) => row.id).sort()).toEqual(oldest.map((row) => row.id).sort());

        const plan = await replayAsExplain(orm, sent.slice(from));
        const nodes = nodesOf(plan.Plan);
        expect({ table, largest: Math.max(...nodes.map((n) => n['Actual Rows'] * n['Actual Loops'])) }).toEqual({
          table,
          largest: BATCH,
        });
        expect(nodes.some((n) => n['Index Name'] === `${table}_claim_idx`)).toBe(true);
        // Sorting off makes the claim look costly; compiling it (JIT) would cost more than running it.
        expect(plan.JIT).toBeUndefined();
      }
      // The settings were the claims' own: the connection they ran on is as it was.
      const [after] = await queryRows<{ sort: string; jit: string }>(
        orm.em.fork(),
        `select current_setting('enable_sort') as "sort", current_setting('jit') as "jit"`,
        [],
      );
      expect(after).toEqual({ sort: 'on', jit: server!.jit });
    });
  });
}

/**
 * Replays `statements` (what one claim sent, in order) in a transaction that is rolled back, up to the claim's own
 * statement, which runs as EXPLAIN ANALYZE: its plan, as PostgreSQL planned it under the settings sent before it
 * (in the same string; as statements of their own on MikroORM 7 where kysely holds the claim's transaction).
 */
async function replayAsExplain(
  orm: MikroORM,
  statements: readonly { readonly sql: string; readonly params: readonly unknown[] }[],
): Promise<{ readonly Plan: PlanNode; readonly JIT?: unknown }> {
  const claimAt = statements.findIndex((s) => /\breturning\b/.test(s.sql));
  expect(claimAt).toBeGreaterThanOrEqual(0);
  let plan: { readonly Plan: PlanNode; readonly JIT?: unknown } | undefined;
  const rolledBack = new Error('rolled back');
  await orm.em
    .fork()
    .transactional(async (tx) => {
      for (const { sql, params } of statements.slice(0, claimAt)) await queryRows(tx, sql, params);
      const { sql, params } = statements[claimAt]!;
      // The settings sent with the claim in one string run first, then the claim alone as EXPLAIN ANALYZE (MikroORM 7's
      // client reads one result per string).
      const at = sql.search(/(with "locked"|update "saga_)/);
      if (sql.slice(0, at).trim()) await executeSql(tx, sql.slice(0, at), [], 'run');
      const rows = await queryRows<{ 'QUERY PLAN': [typeof plan] }>(tx, `explain (analyze, format json) ${sql.slice(at)}`, params);
      plan = rows[0]!['QUERY PLAN'][0];
      throw rolledBack;
    })
    .catch((error: unknown) => {
      if (error !== rolledBack) throw error;
    });
  return plan!;
}

describe('statements that find dispatch rows by id (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('look them up by primary key on a table without statistics, never through the claim index', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const past = new Date(clock.now().getTime() - 3_600_000);
    const seed = db().orm.em.fork();
    await queryRows(
      seed,
      `insert into saga_outbox (id, saga_type, saga_id, message_type, payload, headers, available_at, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid(), 'Relayed', '{"type":"Relayed"}', '{}', ?, gen_random_uuid(), 0, ?
       from generate_series(1, ?) returning 1`,
      [past, past, PENDING],
    );
    await queryRows(
      seed,
      `insert into saga_timer (id, saga_type, saga_id, name, due_at, available_at, message_type, payload, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid(), 'tick', ?, ?, 'Tick', '{"type":"Tick"}', gen_random_uuid(), 0, ?
       from generate_series(1, ?) returning 1`,
      [past, past, past, PENDING],
    );
    await queryRows(
      seed,
      `insert into saga_inbox (id, saga_type, saga_key, message_type, payload, available_at, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid()::text, 'Relayed', '{"type":"Relayed"}', ?, gen_random_uuid(), 0, ?
       from generate_series(1, ?) returning 1`,
      [past, past, PENDING],
    );
    const analyzed = await queryRows<{ n: string }>(
      seed,
      `select count(*) as "n" from pg_stats where tablename in ('saga_outbox', 'saga_timer', 'saga_inbox') and attname = 'dispatched_at'`,
      [],
    );
    expect(Number(analyzed[0]!.n)).toBe(0);

    const sent: { readonly sql: string; readonly params: readonly unknown[] }[] = [];
    const orm = await db().openAnother({
      onQuery: (sql: string, params: readonly unknown[]) => {
        sent.push({ sql, params: [...params] });
        return sql;
      },
    });
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
    const context = runtime.context;
    const now = clock.now();
    const leaseUntil = new Date(now.getTime() + 30_000);
    /** Runs `write`, which must write something, and returns the statements it sent. */
    const statementsOf = async (write: () => Promise<unknown>) => {
      const from = sent.length;
      const result = await write();
      expect(Array.isArray(result) ? result.length : result).toBeGreaterThan(0);
      return sent.slice(from);
    };
    const written: { readonly what: string; readonly sql: string; readonly params: readonly unknown[] }[] = [];
    for (const table of Object.values(DISPATCH_TABLES) as DispatchTable[]) {
      // Writes of 100 rows, a dispatcher's default batch.
      const rows = await claimDueRows(context, table, now, leaseUntil, 250);
      expect(rows).toHaveLength(250);
      const claims: Claim[] = rows.map((row) => ({ id: String(row.id), token: String(row.token) }));
      const writes: Record<string, () => Promise<unknown>> = {
        'start marks': async () => (await markDeliveriesStarted(context, table, claims.slice(0, 100), now)).written,
        'lease renewals': async () => (await renewLeases(context, table, claims.slice(0, 100), leaseUntil)).written,
        release: () => releaseClaim(context, table, claims[100]!),
        failure: () => recordFailure(context, table, { claim: claims[101]!, error: 'Error: boom', retryAt: leaseUntil }),
        'dead letter': () =>
          deadLetter(context, table, { claim: claims[102]!, error: 'Error: boom', reason: 'failed', now, countsAnAttempt: true }),
        ...(table === DISPATCH_TABLES.outbox
          ? { 'published stamps': async () => (await markPublished(context, claims.slice(150), now)).written }
          : {}),
      };
      for (const [what, write] of Object.entries(writes)) {
        for (const statement of await statementsOf(write)) written.push({ what: `${table} ${what}`, ...statement });
      }
    }
    const operations = new SagaOperations({ runtime });
    const [cancelled, rescheduled] = await queryRows<{ id: string }>(
      orm.em.fork(),
      `select "id" from "saga_timer" where "dispatched_at" is null and "locked_until" is null order by "id" limit 2`,
      [],
    );
    const operatorWrites: Record<string, () => Promise<{ items: readonly unknown[] }>> = {
      'cancelTimers()': () => operations.cancelTimers([cancelled!.id]),
      'rescheduleTimers()': () => operations.rescheduleTimers([rescheduled!.id], leaseUntil),
    };
    for (const [what, write] of Object.entries(operatorWrites)) {
      const from = sent.length;
      const result = await write();
      expect(result.items).toEqual([expect.objectContaining({ status: what === 'cancelTimers()' ? 'cancelled' : 'rescheduled' })]);
      for (const statement of sent.slice(from).filter((s) => /^\s*(update|delete)/i.test(s.sql))) {
        written.push({ what: `saga_timer ${what}`, ...statement });
      }
    }
    expect(written.length).toBeGreaterThanOrEqual(13);

    const plans = [];
    for (const { what, sql, params } of written) {
      const [row] = await queryRows<{ 'QUERY PLAN': unknown }>(orm.em.fork(), `explain (format json) ${sql}`, params);
      const plan = JSON.stringify(row!['QUERY PLAN']);
      // saga_inbox's primary key is its order key: its rows are found by id through its unique index on id.
      plans.push({
        what,
        claimIndex: /_claim_idx/.test(plan),
        wholeTable: /"Seq Scan"/.test(plan),
        primaryKey: /_pkey|_id_uniq/.test(plan),
      });
    }
    expect(plans).toEqual(plans.map(({ what }) => ({ what, claimIndex: false, wholeTable: false, primaryKey: true })));
  });
});
