// The statements that find dispatch rows by id (start marks, lease renewals, published stamps, releases, failures,
// dead letters, the operator's timer commands) look those rows up by primary key, whatever the statistics say.
// A table just filled has none yet (autovacuum analyzes it later), and PostgreSQL then believes `dispatched_at is
// null` matches 0.5% of the rows: said so, the pending rows' claim index looks tiny, and the planner read every
// pending row's entry of it to find a few ids (a published stamp of 100 rows among 2,000 pending took 30-50 ms
// instead of 2, and grew with the backlog). Nor do they read the whole table: a literal array of 100 ids made a
// table without statistics look cheaper to scan than to look the ids up. The plans are read with EXPLAIN, which
// runs nothing.
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { queryRows } from '../../src/orm/index.js';
import {
  type Claim,
  claimDueRows,
  DISPATCH_TABLES,
  type DispatchTable,
  deadLetter,
  markDeliveriesStarted,
  markPublished,
  recordFailure,
  releaseClaim,
  renewLeases,
} from '../../src/sql/dispatch-statements.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { useDatabase } from '../support/suite.js';

/** Pending rows per table: enough for the claim index's full scan to be the planner's mistake, not its choice. */
const PENDING = 20_000;

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
    const analyzed = await queryRows<{ n: string }>(
      seed,
      `select count(*) as "n" from pg_stats where tablename in ('saga_outbox', 'saga_timer') and attname = 'dispatched_at'`,
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
        'start marks': () => markDeliveriesStarted(context, table, claims.slice(0, 100), now),
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
      plans.push({ what, claimIndex: /_claim_idx/.test(plan), wholeTable: /"Seq Scan"/.test(plan), primaryKey: /_pkey/.test(plan) });
    }
    expect(plans).toEqual(plans.map(({ what }) => ({ what, claimIndex: false, wholeTable: false, primaryKey: true })));
  });
});
