/**
 * `npm run bench`: mikro-orm-saga next to hand-written SQL doing the same writes, measured in the same run on
 * the same connection pool, reported as a ratio (these machines are shared and noisy: compare ratios, not
 * absolute numbers).
 *
 *   npm run bench                      # SQLite, and PostgreSQL when reachable (DATABASE_URL or 127.0.0.1:5432)
 *   BENCH_N=5000 npm run bench         # more messages per scenario (default 1000)
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EntityManager, MikroORM } from '@mikro-orm/core';
import pg from 'pg';
import { SAGA_MIGRATIONS } from '../migrations/index.js';
import { SAGA_ENTITIES, SagaDispatcher, SagaRuntime, silentLogger } from '../src/index.js';
import { migrateUp, updateSchema } from '../src/orm/index.js';
import { drainDueTimers, FakeClock } from '../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../test/fixtures/scripted-saga.js';

const N = Number(process.env.BENCH_N ?? 1_000);
const PG_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

interface Row {
  readonly dialect: string;
  readonly scenario: string;
  readonly ours: number;
  readonly raw: number;
}

async function time(work: () => Promise<void>): Promise<number> {
  const started = process.hrtime.bigint();
  await work();
  return Number(process.hrtime.bigint() - started) / 1e9;
}

const opsPerSecond = (seconds: number) => Math.round(N / seconds);

async function openOrm(dialect: 'sqlite' | 'postgresql'): Promise<{ orm: MikroORM; dispose: () => Promise<void> }> {
  const { Migrator } = await import('@mikro-orm/migrations');
  const entities = [...SAGA_ENTITIES, ScriptedSaga];
  if (dialect === 'sqlite') {
    const file = join(tmpdir(), `saga-bench-${randomUUID()}.sqlite`);
    const { SqliteDriver } = await import('@mikro-orm/sqlite');
    const orm = await MikroORM.init({
      driver: SqliteDriver,
      dbName: file,
      entities,
      extensions: [Migrator],
      migrations: { migrationsList: [...SAGA_MIGRATIONS.sqlite], silent: true, snapshot: false },
    });
    await migrateUp(orm);
    await updateSchema(orm);
    const dispose = async () => {
      await orm.close(true);
      rmSync(file, { force: true });
    };
    return { orm, dispose };
  }
  const name = `saga_bench_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const admin = new pg.Client(PG_URL);
  await admin.connect();
  await admin.query(`create database "${name}"`);
  const url = new URL(PG_URL);
  url.pathname = `/${name}`;
  const { PostgreSqlDriver } = await import('@mikro-orm/postgresql');
  const orm = await MikroORM.init({
    driver: PostgreSqlDriver,
    clientUrl: url.toString(),
    entities,
    extensions: [Migrator],
    migrations: { migrationsList: [...SAGA_MIGRATIONS.postgresql], silent: true, snapshot: false },
  });
  await migrateUp(orm);
  await updateSchema(orm);
  return {
    orm,
    dispose: async () => {
      await orm.close(true);
      await admin.query(`drop database if exists "${name}" with (force)`);
      await admin.end();
    },
  };
}

/** Raw SQL of one transaction, on the same driver and pool the library uses. */
function raw(em: EntityManager) {
  return (work: (sql: (query: string, params?: unknown[]) => Promise<unknown[]>) => Promise<void>) =>
    em.fork().transactional(async (tx) => {
      const execute = (tx as unknown as { execute: (q: string, p?: unknown[], m?: string) => Promise<unknown[]> }).execute.bind(tx);
      await work((query, params = []) => execute(query, params, 'all'));
    });
}

async function bench(dialect: 'sqlite' | 'postgresql'): Promise<Row[]> {
  const { orm, dispose } = await openOrm(dialect);
  const rows: Row[] = [];
  try {
    const clock = new FakeClock('2026-01-05T09:00:00Z');
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
    const tx = raw(orm.em);
    const now = clock.now();
    const in2Minutes = new Date(now.getTime() + 120_000);

    // 1. A start message: insert the saga, one timer, one outbox row, in one transaction.
    const ours1 = await time(async () => {
      for (let i = 0; i < N; i++) {
        await runtime.handle(scriptedSaga, {
          type: 'Start',
          key: `a-${i}`,
          actions: [
            { op: 'schedule', name: 'reminder', after: 60_000 },
            { op: 'send', message: { type: 'Welcome', n: i } },
          ],
        });
      }
    });
    const raw1 = await time(async () => {
      for (let i = 0; i < N; i++) {
        await tx(async (sql) => {
          await sql('select * from "scripted_saga" where "key" = ? limit 1', [`r-${i}`]);
          const id = randomUUID();
          await sql(
            'insert into "scripted_saga" ("id", "created_at", "updated_at", "completed_at", "version", "key", "stage", "counter", "log") values (?, ?, ?, null, 0, ?, ?, 0, ?)',
            [id, now, now, `r-${i}`, 'open', 'started;'],
          );
          await sql(
            `insert into "saga_timer" ("id", "saga_type", "saga_id", "name", "step", "due_at", "available_at", "message_type", "payload", "token", "attempts", "created_at")
             values (?, 'raw', ?, 'reminder', 'open', ?, ?, 'Tick', ?, ?, 0, ?)`,
            [randomUUID(), id, now, now, '{"type":"Tick"}', randomUUID(), now],
          );
          await sql(
            `insert into "saga_outbox" ("id", "saga_type", "saga_id", "message_type", "payload", "headers", "available_at", "token", "attempts", "created_at")
             values (?, 'raw', ?, 'Welcome', ?, '{}', ?, ?, 0, ?)`,
            [randomUUID(), id, `{"type":"Welcome","n":${i}}`, now, randomUUID(), now],
          );
        });
      }
    });
    rows.push({ dialect, scenario: 'start: saga + timer + outbox row', ours: opsPerSecond(ours1), raw: opsPerSecond(raw1) });

    // 2. A message to an existing saga: versioned update and an in-place timer replacement.
    const ours2 = await time(async () => {
      for (let i = 0; i < N; i++) {
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key: `a-${i}`,
          actions: [{ op: 'inc' }, { op: 'schedule', name: 'reminder', after: 120_000 }],
        });
      }
    });
    const raw2 = await time(async () => {
      for (let i = 0; i < N; i++) {
        await tx(async (sql) => {
          const [saga] = (await sql('select * from "scripted_saga" where "key" = ? limit 1', [`r-${i}`])) as {
            id: string;
            version: number;
          }[];
          await sql(
            'update "scripted_saga" set "counter" = "counter" + 1, "version" = ?, "updated_at" = ? where "id" = ? and "version" = ?',
            [saga!.version + 1, now, saga!.id, saga!.version],
          );
          await sql(
            `update "saga_timer" set "due_at" = ?, "available_at" = ?, "token" = ? where "saga_type" = 'raw' and "saga_id" = ? and "name" = 'reminder' and "dispatched_at" is null`,
            [in2Minutes, in2Minutes, randomUUID(), saga!.id],
          );
        });
      }
    });
    rows.push({ dialect, scenario: 'update: versioned state + replace timer', ours: opsPerSecond(ours2), raw: opsPerSecond(raw2) });

    // 3. Firing: claim due timers and deliver each (state change + fired stamp in one transaction).
    // The hand-written dispatcher fires its own rows (saga type 'raw') first, then ours drains the rest.
    clock.advance({ minutes: 5 });
    const raw3 = await time(async () => {
      for (;;) {
        const claimed: { id: string; token: string; saga_id: string }[] = [];
        await tx(async (sql) => {
          const due = (await sql(
            `select "id", "token", "saga_id" from "saga_timer" where "dispatched_at" is null and "available_at" <= ? and "saga_type" = 'raw' order by "available_at", "id" limit 100`,
            [clock.now()],
          )) as { id: string; token: string; saga_id: string }[];
          for (const row of due) {
            const token = randomUUID();
            await sql('update "saga_timer" set "token" = ?, "locked_until" = ? where "id" = ? and "token" = ?', [
              token,
              clock.now(),
              row.id,
              row.token,
            ]);
            claimed.push({ ...row, token });
          }
        });
        if (claimed.length === 0) break;
        for (const row of claimed) {
          await tx(async (sql) => {
            const [saga] = (await sql('select * from "scripted_saga" where "id" = ? limit 1', [row.saga_id])) as {
              version: number;
              log: string;
            }[];
            await sql('update "scripted_saga" set "log" = ?, "version" = ?, "updated_at" = ? where "id" = ? and "version" = ?', [
              `${saga!.log}tick;`,
              saga!.version + 1,
              clock.now(),
              row.saga_id,
              saga!.version,
            ]);
            await sql(
              `update "saga_timer" set "dispatched_at" = ?, "outcome" = 'fired' where "id" = ? and "token" = ? and "dispatched_at" is null`,
              [clock.now(), row.id, row.token],
            );
          });
        }
      }
    });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, concurrency: 1, batchSize: 100 });
    const ours3 = await time(async () => {
      const report = await drainDueTimers(dispatcher);
      if (report.timers.fired !== N) throw new Error(`fired ${report.timers.fired} of ${N}`);
    });
    rows.push({ dialect, scenario: 'fire: claim + deliver + stamp fired', ours: opsPerSecond(ours3), raw: opsPerSecond(raw3) });

    // 4. Concurrent firing: the same, ten sagas at a time (the dispatcher's default concurrency).
    await runtime.handle(scriptedSaga, { type: 'Start', key: 'warm' });
    for (let i = 0; i < N; i++) {
      await runtime.handle(scriptedSaga, { type: 'Do', key: `a-${i}`, actions: [{ op: 'schedule', name: 'again', after: 1_000 }] });
    }
    clock.advance({ minutes: 5 });
    const parallel = new SagaDispatcher({ runtime, logger: silentLogger, concurrency: 10, batchSize: 100 });
    const ours4 = await time(async () => {
      const report = await drainDueTimers(parallel);
      if (report.timers.fired !== N) throw new Error(`fired ${report.timers.fired} of ${N}`);
    });
    rows.push({ dialect, scenario: 'fire, concurrency 10 (vs raw, 1 client)', ours: opsPerSecond(ours4), raw: opsPerSecond(raw3) });
  } finally {
    await dispose();
  }
  return rows;
}

async function postgresReachable(): Promise<boolean> {
  const client = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

const results = [...(await bench('sqlite'))];
if (await postgresReachable()) results.push(...(await bench('postgresql')));
else console.log(`PostgreSQL not reachable at ${PG_URL}: SQLite only.`);

console.log(`\nmikro-orm-saga vs raw SQL, ${N} messages per scenario, one client, same run (higher is better)\n`);
console.log(`${'database'.padEnd(11)}${'scenario'.padEnd(42)}${'ours/s'.padStart(9)}${'raw/s'.padStart(9)}${'ours/raw'.padStart(10)}`);
for (const row of results) {
  console.log(
    `${row.dialect.padEnd(11)}${row.scenario.padEnd(42)}${String(row.ours).padStart(9)}${String(row.raw).padStart(9)}${(row.ours / row.raw).toFixed(2).padStart(10)}`,
  );
}
