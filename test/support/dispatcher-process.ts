/**
 * A dispatcher in a process of its own, with its own MikroORM instance, for the process-level tests.
 *
 *   node --import tsx test/support/dispatcher-process.ts <mode> <postgresql|sqlite|better-sqlite> <url or file> [options JSON]
 *
 * Every mode prints JSON lines on stdout.
 * mode `drain`: runs passes until one claims nothing; prints one `claim` line per claimed timer and a final
 *   `done` line. Uses the system clock. With `{ "waitForGo": true }` it prints `ready` once connected and
 *   starts when a line arrives on stdin, so several processes start together. A failed pass prints
 *   `passFailed`. With `holdAtStep: n`, the n-th step it runs never returns and prints `holding`, so the parent
 *   can kill the process while it holds claims; `clockOffsetMs` as for `poison`, `leaseMs` as for the dispatcher.
 *   With `pauseAfterPasses: [k, ...]`, after its k-th pass it prints `paused` and waits for a line on stdin before
 *   the next claim, so the parent can break the database just before it.
 * mode `hang`: claims due timers and hangs inside their steps forever; prints `entered <n>` each time a step
 *   starts, so the parent can kill the process between claim and commit.
 * mode `poison`: like `drain`, but the step of a timer labelled `poison` kills its own process (SIGKILL);
 *   `clockOffsetMs` shifts the system clock, so a supervisor restarting it can move past the dead process's
 *   leases without waiting; `maxAttempts` as for the dispatcher.
 * `applicationName` (PostgreSQL) names the process's connections, so a test can terminate them alone.
 */
import { MikroORM } from '@mikro-orm/core';
import { type Clock, SagaDispatcher, SagaRuntime, silentLogger, systemClock } from '../../src/index.js';
import { pgConnectionOptions } from '../../src/orm/connection-info.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { childDialect, childOrmOptions } from './child-orm-options.js';

/** Options a parent passes as the last argument (JSON). */
export interface ChildOptions {
  readonly waitForGo?: boolean;
  readonly batchSize?: number;
  readonly concurrency?: number;
  readonly clockOffsetMs?: number;
  readonly maxAttempts?: number;
  readonly leaseMs?: number;
  readonly holdAtStep?: number;
  readonly applicationName?: string;
  readonly pauseAfterPasses?: readonly number[];
}

const [mode, dialectArg, location, json] = process.argv.slice(2);
const dialect = childDialect(dialectArg);
if (!location || !['drain', 'hang', 'poison'].includes(mode ?? '') || !dialect) {
  console.error('usage: dispatcher-process.ts <drain|hang|poison> <postgresql|sqlite|better-sqlite> <url or file> [options JSON]');
  process.exit(2);
}
const options = JSON.parse(json ?? '{}') as ChildOptions;
/**
 * Opens the ORM with a pool no larger than the deliveries need. The PostgreSQL server is shared by parallel
 * test files: when it has no connection slot free ("too many clients"), opening is retried a bounded number
 * of times instead of failing the process before it dispatched anything.
 */
async function openOrm(): Promise<MikroORM> {
  const config = await childOrmOptions(dialect!, location!, [ScriptedSaga]);
  const pool = dialect === 'postgresql' ? { pool: { min: 0, max: (options.concurrency ?? 10) + 3 } } : {};
  const named = options.applicationName ? { driverOptions: pgConnectionOptions({ applicationName: options.applicationName }) } : {};
  for (let attempt = 1; ; attempt++) {
    try {
      return await MikroORM.init({ ...config, ...pool, ...named });
    } catch (error) {
      if (attempt >= 40 || !/too many clients/i.test(String((error as Error)?.message))) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}
const orm = await openOrm();
const print = (line: object) => process.stdout.write(`${JSON.stringify({ pid: process.pid, ...line })}\n`);

/** Runs passes until one claims nothing; a failed pass (database busy) is counted and run again. */
async function drain(dispatcher: SagaDispatcher): Promise<void> {
  dispatcher.on('claimed', ({ ids, at, leaseUntil }) => {
    for (const id of ids) print({ event: 'claim', id, at: at.toISOString(), leaseUntil: leaseUntil.toISOString() });
  });
  const totals = { passes: 0, failedPasses: 0, claimed: 0, fired: 0, stale: 0, failed: 0, interrupted: 0, deadLettered: 0 };
  for (;;) {
    let pass: Awaited<ReturnType<SagaDispatcher['runOnce']>>;
    try {
      pass = await dispatcher.runOnce();
    } catch {
      totals.failedPasses++;
      print({ event: 'passFailed' });
      continue;
    }
    totals.passes++;
    totals.claimed += pass.timers.claimed;
    totals.fired += pass.timers.fired;
    totals.stale += pass.timers.stale;
    totals.failed += pass.timers.failed;
    totals.interrupted += pass.timers.interrupted;
    totals.deadLettered += pass.timers.deadLettered;
    if (pass.timers.claimed === 0) break;
    if (options.pauseAfterPasses?.includes(totals.passes)) {
      print({ event: 'paused' });
      await nextLineOnStdin();
    }
  }
  print({ event: 'done', ...totals });
}

/** Waits for the parent to write a line; the parent writes one per `ready` or `paused` it read. */
async function nextLineOnStdin(): Promise<void> {
  process.stdin.resume();
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  process.stdin.pause();
}

if (options.waitForGo) {
  print({ event: 'ready' });
  await nextLineOnStdin();
}

/** The system clock, shifted by `clockOffsetMs`: a restarted process can stand past a dead one's leases. */
const clock: Clock = { now: () => new Date(Date.now() + (options.clockOffsetMs ?? 0)), sleep: systemClock.sleep };

if (mode === 'drain') {
  let steps = 0;
  const holding = scriptedSagaWithTick(async (saga, message) => {
    if (++steps === options.holdAtStep) {
      print({ event: 'holding' });
      // Never returns: the parent kills the process while this delivery and the rest of its claims are open.
      await new Promise(() => {});
    }
    saga.log += `tick:${message.label};`;
  });
  const runtime = new SagaRuntime({
    em: orm.em,
    sagas: [options.holdAtStep ? holding : scriptedSaga],
    clock,
    concurrency: { maxAttempts: 100 },
  });
  const dispatcher = new SagaDispatcher({
    runtime,
    logger: silentLogger,
    // The dispatcher's own default unless given: 100 on PostgreSQL, 2 x concurrency on SQLite.
    ...(options.batchSize ? { batchSize: options.batchSize } : {}),
    concurrency: options.concurrency ?? 10,
    ...(options.leaseMs ? { leaseMs: options.leaseMs } : {}),
  });
  await drain(dispatcher);
} else if (mode === 'poison') {
  const poisoned = scriptedSagaWithTick((saga, message) => {
    // Dies as an out-of-memory kill would: no cleanup, no failure recorded, the lease left behind.
    if (message.label === 'poison') process.kill(process.pid, 'SIGKILL');
    saga.log += `tick:${message.label};`;
  });
  const runtime = new SagaRuntime({ em: orm.em, sagas: [poisoned], clock, concurrency: { maxAttempts: 100 } });
  const dispatcher = new SagaDispatcher({
    runtime,
    logger: silentLogger,
    batchSize: options.batchSize ?? 100,
    concurrency: options.concurrency ?? 10,
    maxAttempts: options.maxAttempts ?? 10,
  });
  await drain(dispatcher);
} else {
  let entered = 0;
  const hanging = scriptedSagaWithTick(async () => {
    print({ event: 'entered', count: ++entered });
    // Never returns: the process is killed while it holds the claims.
    await new Promise(() => {});
  });
  const runtime = new SagaRuntime({ em: orm.em, sagas: [hanging] });
  const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, batchSize: 100, concurrency: 50 });
  dispatcher.on('claimed', ({ ids }) => print({ event: 'claimed', count: ids.length }));
  await dispatcher.runOnce();
}
await orm.close(true);
