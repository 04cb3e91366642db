/**
 * One outbox relay in a process of its own, for the relay figures of `npm run bench`.
 *
 *   node --import tsx bench/relay-process.ts <ours|raw|graphile-worker> <postgres url> [options JSON]
 *
 * Connects, prints `{"event":"ready"}`, starts when a line arrives on stdin, relays due rows to a no-op
 * publisher until none is left, then prints `{"event":"done","published":n}` and exits. Each relay loads only
 * its own modules, before it is ready (the baselines start without MikroORM).
 */
import type { MikroORM } from '@mikro-orm/core';
import type pg from 'pg';

/** Options the parent passes. */
export interface RelayOptions {
  readonly batchSize: number;
  readonly concurrency: number;
}

/** A relay: connect, then drain (returning how many rows it published), then close. */
interface Relay {
  connect(): Promise<void>;
  drain(): Promise<number>;
  close(): Promise<void>;
}

const [kind, url, json] = process.argv.slice(2);
const options: RelayOptions = { batchSize: 100, concurrency: 10, ...(JSON.parse(json ?? '{}') as Partial<RelayOptions>) };
/** The publisher every relay hands its messages to. */
const noop = async (_message: unknown) => {};

/** mikro-orm-saga's dispatcher with a no-op publisher, its loop running until a pass claims nothing. */
function ours(): Relay {
  let orm!: MikroORM;
  let saga!: typeof import('../src/index.js');
  let scripted!: typeof import('../test/fixtures/scripted-saga.js');
  return {
    async connect() {
      const { MikroORM } = await import('@mikro-orm/core');
      const { ormOptions } = await import('../test/support/orm-options.js');
      saga = await import('../src/index.js');
      scripted = await import('../test/fixtures/scripted-saga.js');
      orm = await MikroORM.init({
        ...ormOptions('postgresql', url!, [scripted.ScriptedSaga]),
        pool: { min: 0, max: Math.min(options.concurrency, 10) + 2 },
      });
    },
    async drain() {
      const { SagaDispatcher, SagaRuntime, silentLogger } = saga;
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scripted.scriptedSaga] });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: noop, ...options });
      let published = 0;
      dispatcher.on('pass', (pass) => {
        published += pass.outbox.published;
      });
      // The loop an application runs (`start()`), until a pass claims nothing; stop() waits for the passes in flight.
      await new Promise<void>((resolve) => {
        dispatcher.on('idle', resolve);
        dispatcher.start();
      });
      await dispatcher.stop();
      return published;
    },
    close: () => orm.close(true),
  };
}

/** Hand-written SQL: claim a batch with one statement, publish each row, stamp the batch with one statement. */
function raw(): Relay {
  let client!: pg.Client;
  return {
    connect: async () => {
      const { default: pg } = await import('pg');
      client = new pg.Client(url);
      await client.connect();
    },
    async drain() {
      let published = 0;
      for (;;) {
        const { rows } = await client.query<{ id: string; token: string; payload: unknown; headers: unknown }>(
          `update saga_outbox set token = gen_random_uuid(), locked_until = now() + interval '30 seconds'
           where id in (select id from saga_outbox where dispatched_at is null and available_at <= now()
             and (locked_until is null or locked_until <= now()) order by available_at, id limit $1 for update skip locked)
           returning id, token, payload, headers`,
          [options.batchSize],
        );
        if (rows.length === 0) return published;
        for (const row of rows) await noop(row);
        await client.query(
          `update saga_outbox set dispatched_at = now(), outcome = 'published', locked_until = null
           where id = any($1::uuid[]) and token = any($2::uuid[]) and dispatched_at is null`,
          [rows.map((r) => r.id), rows.map((r) => r.token)],
        );
        published += rows.length;
      }
    },
    close: () => client.end(),
  };
}

/** graphile-worker's batched mode: a local queue of `batchSize` jobs and batched completions. */
function graphileWorker(): Relay {
  let worker!: typeof import('graphile-worker');
  return {
    connect: async () => {
      worker = await import('graphile-worker');
    },
    async drain() {
      const { Logger, runOnce } = worker;
      let published = 0;
      await runOnce({
        connectionString: url!,
        concurrency: options.concurrency,
        noHandleSignals: true,
        logger: new Logger(() => () => undefined),
        taskList: {
          relay: async () => {
            published++;
          },
        },
        preset: { worker: { localQueue: { size: options.batchSize }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
      });
      return published;
    },
    close: async () => undefined,
  };
}

const relays: Record<string, () => Relay> = { ours, raw, 'graphile-worker': graphileWorker };
const make = relays[kind ?? ''];
if (!make || !url) {
  console.error('usage: relay-process.ts <ours|raw|graphile-worker> <postgres url> [options JSON]');
  process.exit(2);
}
const relay = make();
await relay.connect();
process.stdout.write(`${JSON.stringify({ event: 'ready' })}\n`);
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
process.stdin.pause();
const published = await relay.drain();
process.stdout.write(`${JSON.stringify({ event: 'done', published })}\n`);
await relay.close();
