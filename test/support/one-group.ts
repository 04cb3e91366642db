import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import type { ScriptedSaga } from '../fixtures/scripted-saga.js';
import type { TestDatabase } from './databases.js';
import { drainContinuations } from './flush-hold.js';
import { type GatedSaga, type GatedState, gatedSaga } from './gated-saga.js';
import { recordStatements } from './pg-statements.js';
import { lockWaiters, untilLockWaiters } from './row-locks.js';
import { StepGate } from './step-gate.js';

/**
 * Locks the rows of `table` whose `column` is `value` (FOR UPDATE) in a transaction on an ORM of its own (pushed to
 * `opened`, for the test to close), until `release()`. PostgreSQL.
 */
export async function holdRow(database: TestDatabase, opened: MikroORM[], table: string, column: string, value: unknown) {
  const holder = await database.openAnother({ pool: { min: 1, max: 1 } });
  opened.push(holder);
  const held = holder.em.fork();
  await held.begin();
  await held.getConnection().execute(`select 1 from ${table} where ${column} = ? for update`, [value], 'all', held.getTransactionContext());
  return { release: () => held.rollback() };
}

/**
 * Makes the units `units()` starts one group, under a runtime writing one group at a time: `first` (a unit on the
 * row `held` locks) is written first, alone, and waits for that row; the units start meanwhile, their steps gated by
 * `gate`, reach their write phase together and queue for the next group, which starts once `held` is released.
 * The statements sent from the release on are recorded. PostgreSQL.
 */
export async function gatherOneGroup<R, T>(
  database: TestDatabase,
  gate: StepGate,
  held: { release(): Promise<unknown> },
  first: () => Promise<R>,
  units: () => T,
) {
  const before = await lockWaiters(database.orm);
  const firstDone = first();
  await untilLockWaiters(database.orm, before + 1);
  const started = units();
  await gate.all.promise;
  gate.go.resolve();
  await drainContinuations();
  await drainContinuations();
  const recording = recordStatements();
  await held.release();
  return { first: firstDone, started, recording };
}

/**
 * The set-up of the tests that write units as one group (PostgreSQL), for a describe block: ORMs it opens are closed
 * after each test. `setUp` starts a gated saga on `keys` and gives a runtime on an ORM of its own (`overrides`) that
 * writes one group at a time; `asOneGroup` runs `units` as one group behind a first unit on `blockerKey`, whose saga
 * row (`table`, by its `key` column) another transaction holds until the units queued.
 */
export function groupWriting(db: () => TestDatabase) {
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });
  async function setUp<S extends GatedState = ScriptedSaga>(
    keys: readonly string[],
    gated: number,
    options: { overrides?: Partial<Options>; lockTimeoutMs?: number; maxAttempts?: number; state?: new () => S } = {},
  ) {
    const gate = new StepGate(gated);
    const saga = gatedSaga<S>(gate, options.state ? { state: options.state } : {});
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    for (const key of keys) await plain.handle(saga, { type: 'Start', key });
    const orm = await db().openAnother(options.overrides ?? {});
    opened.push(orm);
    const runtime = new SagaRuntime({
      em: orm.em,
      sagas: [saga],
      groupCommit: { maxGroups: 1, lockTimeoutMs: options.lockTimeoutMs ?? 60_000 },
      concurrency: { baseDelayMs: 0, ...(options.maxAttempts ? { maxAttempts: options.maxAttempts } : {}) },
    });
    return { gate, saga, plain, runtime };
  }
  /** Locks the saga row of `key` in `table` in a transaction of its own until `release()`. */
  const hold = (key: string, table = 'scripted_saga') => holdRow(db(), opened, table, 'key', key);
  async function asOneGroup<T, S extends GatedState>(
    gate: StepGate,
    runtime: SagaRuntime,
    saga: GatedSaga<S>,
    blockerKey: string,
    units: () => T,
    { table = 'scripted_saga', note }: { table?: string; note?: string } = {},
  ) {
    const first = () => runtime.handle(saga, { type: 'Do', key: blockerKey, inc: 1, ...(note === undefined ? {} : { note }) });
    return gatherOneGroup(db(), gate, await hold(blockerKey, table), first, units);
  }
  return { opened, setUp, hold, asOneGroup };
}
