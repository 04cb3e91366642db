/**
 * One outbox relay in a process of its own, for the relay figures of `npm run bench`.
 *
 *   node --import tsx bench/relay-process.ts <ours|raw|graphile-worker> <postgres url> <options JSON>
 *
 * The options are a `RelaySetting` (bench/relay-settings.ts), plus `rows` (the rows all processes publish
 * together) and `latency` for the latency figure.
 * Drain mode: connects, prints `{"event":"ready"}`, starts when a line arrives on stdin, relays due rows to a no-op
 * publisher until none is left, then prints `{"event":"done","published":n}` and exits. Ours ends when every row
 * was published (counted over all processes from the database), not at its first `idle` event: `idle` can come
 * while a pass the loop overtook still delivers rows it claimed, and `stop()` would give those back unpublished.
 * Latency mode (ours and graphile-worker): starts its loop before it is ready (idle, as a relay waiting for work
 * is), relays until `rows` rows were published, then prints `{"event":"done","published":n,"latenciesMs":
 * {"median":..,"p99":..}}`: publish time minus each row's commit time (ours: `created_at`, which the producer
 * sets in its one-statement transaction; graphile-worker: the job's `run_at`, its transaction's `now()`).
 * Each relay loads only its own modules, before it is ready (the baselines start without MikroORM).
 */
import type { MikroORM } from '@mikro-orm/core';
import type pg from 'pg';
import type { RelaySetting } from './relay-settings.js';

/** A relay: connect, then relay (returning how many rows it published), then close. */
interface Relay {
  connect(): Promise<void>;
  /** Latency mode: start the loop before the producer starts. */
  start?(): Promise<void>;
  drain(): Promise<number>;
  close(): Promise<void>;
}

const [kind, url, json] = process.argv.slice(2);
const options = JSON.parse(json ?? '{}') as RelaySetting & { rows: number; latency?: boolean };
const latency = options.latency === true;
/** Publish time minus commit time of every row, in latency mode. */
const latencies: number[] = [];
/** The publisher every relay hands its messages to: a no-op, or in latency mode a clock reading. */
const publish = (committedAt: Date) => {
  if (latency) latencies.push(Date.now() - committedAt.getTime());
};
let published = 0;
let allPublished!: () => void;
/** Resolves in latency mode when `rows` rows were published. */
const everyRow = new Promise<void>((resolve) => {
  allPublished = resolve;
});
const count = () => {
  if (++published === options.rows) allPublished();
};

/** Rows no relay process has published yet, at the first `idle` of ours (for the done line). */
let pendingAtIdle: number | undefined;

/**
 * Waits until no outbox row is left unpublished, asking every 5 ms whether one is (a read of one index entry: a
 * count of every pending row, asked this often, took CPU from the process still draining); returns how many were
 * left at first.
 */
async function untilNonePending(client: pg.Client): Promise<number> {
  const first = Number((await client.query<{ n: string }>('select count(*) as n from saga_outbox where dispatched_at is null')).rows[0]!.n);
  const anyLeft = async () =>
    (await client.query<{ left: boolean }>('select exists (select 1 from saga_outbox where dispatched_at is null) as "left"')).rows[0]!
      .left;
  for (let left = first > 0; left; left = await anyLeft()) await new Promise((resolve) => setTimeout(resolve, 5));
  return first;
}

/** mikro-orm-saga's dispatcher: its `start()` loop, until every row was published (drain) or came (latency). */
function ours(): Relay {
  let orm!: MikroORM;
  let dispatcher!: import('../src/index.js').SagaDispatcher;
  let idle!: Promise<void>;
  /** Asks the database whether rows are left, connected before the start (not timed). */
  let client!: pg.Client;
  return {
    async connect() {
      const { default: pg } = await import('pg');
      client = new pg.Client(url);
      await client.connect();
      const { MikroORM } = await import('@mikro-orm/core');
      const { ormOptions } = await import('../test/support/orm-options.js');
      const { SagaDispatcher, SagaRuntime, silentLogger } = await import('../src/index.js');
      const scripted = await import('../test/fixtures/scripted-saga.js');
      orm = await MikroORM.init({
        ...ormOptions('postgresql', url!, [scripted.ScriptedSaga]),
        pool: { min: 0, max: Math.min(options.concurrency, 10) + 2 },
      });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scripted.scriptedSaga] });
      dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        publish: async (envelope) => {
          publish(envelope.createdAt);
          count();
        },
        publishConcurrency: options.concurrency,
        batchSize: options.batch!,
        pollIntervalMs: options.pollMs!,
      });
      idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
    },
    async start() {
      dispatcher.start();
      await idle;
    },
    async drain() {
      if (latency) await everyRow;
      // The loop an application runs (`start()`), until a pass claims nothing and every row is published; stop()
      // waits for the passes in flight.
      else {
        dispatcher.start();
        await idle;
        pendingAtIdle = await untilNonePending(client);
      }
      await dispatcher.stop();
      return published;
    },
    async close() {
      await client.end();
      await orm.close(true);
    },
  };
}

/** Runs `work` on every item, at most `limit` at once. */
async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  if (limit <= 1) {
    for (const item of items) await work(item);
    return;
  }
  let next = 0;
  const slot = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, slot));
}

/** Hand-written SQL: claim a batch with one statement, publish its rows `concurrency` at a time, stamp the batch with one statement. */
function raw(): Relay {
  let client!: pg.Client;
  return {
    connect: async () => {
      const { default: pg } = await import('pg');
      client = new pg.Client(url);
      await client.connect();
    },
    async drain() {
      for (;;) {
        const { rows } = await client.query<{ id: string; token: string; payload: unknown; created_at: Date }>(
          `update saga_outbox set token = gen_random_uuid(), locked_until = now() + interval '30 seconds'
           where id in (select id from saga_outbox where dispatched_at is null and available_at <= now()
             and (locked_until is null or locked_until <= now()) order by available_at, id limit $1 for update skip locked)
           returning id, token, payload, headers, created_at`,
          [options.batch],
        );
        if (rows.length === 0) return published;
        await eachLimited(rows, options.concurrency, async (row) => {
          publish(row.created_at);
          count();
        });
        await client.query(
          `update saga_outbox set dispatched_at = now(), outcome = 'published', locked_until = null
           where id = any($1::uuid[]) and token = any($2::uuid[]) and dispatched_at is null`,
          [rows.map((r) => r.id), rows.map((r) => r.token)],
        );
      }
    },
    close: () => client.end(),
  };
}

/** graphile-worker: `runOnce` (drain) or `run` (latency), with the setting's concurrency, local queue and poll interval. */
function graphileWorker(): Relay {
  let worker!: typeof import('graphile-worker');
  let runner: import('graphile-worker').Runner | undefined;
  const runnerOptions = () => {
    const { Logger } = worker;
    // No local queue is graphile-worker's default (size -1), and so are one-by-one completions (delay -1).
    const batched = options.batch === null ? {} : { localQueue: { size: options.batch }, completeJobBatchDelay: 0, failJobBatchDelay: 0 };
    return {
      connectionString: url!,
      concurrency: options.concurrency,
      pollInterval: options.pollMs!,
      noHandleSignals: true,
      logger: new Logger(() => () => undefined),
      taskList: {
        relay: async (_payload: unknown, helpers: import('graphile-worker').JobHelpers) => {
          publish(helpers.job.run_at);
          count();
        },
      },
      preset: { worker: batched },
    };
  };
  return {
    connect: async () => {
      worker = await import('graphile-worker');
    },
    async start() {
      runner = await worker.run(runnerOptions());
    },
    async drain() {
      if (runner) {
        await everyRow;
        await runner.stop();
      } else await worker.runOnce(runnerOptions());
      return published;
    },
    close: async () => undefined,
  };
}

/** The median and 99th percentile of `values` (nearest rank). */
function percentiles(values: number[]): { median: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
  return { median: at(0.5), p99: at(0.99) };
}

const relays: Record<string, () => Relay> = { ours, raw, 'graphile-worker': graphileWorker };
const make = relays[kind ?? ''];
if (!make || !url || !json) {
  console.error('usage: relay-process.ts <ours|raw|graphile-worker> <postgres url> <options JSON>');
  process.exit(2);
}
const relay = make();
await relay.connect();
if (latency) await relay.start?.();
process.stdout.write(`${JSON.stringify({ event: 'ready' })}\n`);
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
process.stdin.pause();
const total = await relay.drain();
const extra = latency ? { latenciesMs: percentiles(latencies) } : pendingAtIdle === undefined ? {} : { pendingAtIdle };
process.stdout.write(`${JSON.stringify({ event: 'done', published: total, ...extra })}\n`);
await relay.close();
