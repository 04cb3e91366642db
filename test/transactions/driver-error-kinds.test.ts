// What src/orm/driver-errors.ts calls each database error, shown on errors produced for real through MikroORM on
// every database and driver of the run (both majors run this file). The runtime, the dispatcher and the operator
// API map these kinds to their own codes, so a driver or major that raised something else would show here first.
//
// Kinds a database cannot produce are left out of its table:
// - SQLite has no deadlock or serialization failure (a writer waits for the file lock: `lock wait`), no statement
//   timeout (`canceled or out of resources`) and no socket (`never sent`); its COMMIT runs in-process, so its outcome
//   is always known (no `outcome unknown`). A pool with every connection in use (`no free connection`) is produced on
//   PostgreSQL only.
// - PostgreSQL's `database failure` (SQLSTATE class 58: an I/O error of the server) needs a failing disk, and an
//   `other` driver error (class XX: an internal error) a server bug; the rules know them by their SQLSTATE class.
import { tmpdir } from 'node:os';
import { type EntityManager, type EventSubscriber, MikroORM, type Options } from '@mikro-orm/core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dialectOf } from '../../src/dialect/dialect-adapter.js';
import { SagaRuntime } from '../../src/index.js';
import { pgConnectionOptions } from '../../src/orm/connection-info.js';
import type { DriverErrorContext } from '../../src/orm/driver-errors.js';
import { classifyDriverError, convertDriverError, createUnitTransactions, type DriverErrorKind } from '../../src/orm/index.js';
import { executeSql, queryRows } from '../../src/orm/sql-execution.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { closedPort } from '../support/closed-port.js';
import { DIALECTS, sagaDialectOf, type TestDatabase } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { CommitDroppingProxy } from '../support/tcp-proxy.js';

/** How one kind of error is produced, and what the classifier must call it. */
interface KindCase {
  /** How the error comes about. */
  readonly what: string;
  readonly kind: DriverErrorKind;
  /** The databases that produce it. */
  readonly on: readonly ('postgresql' | 'sqlite')[];
  /** What the classifier is told besides the error (the runtime tells it when the statement was COMMIT). */
  readonly context?: (db: TestDatabase) => DriverErrorContext;
  /** Runs what fails; resolves with the error it threw. */
  readonly produce: (fixture: Fixture) => Promise<unknown>;
}

/** What a case works with: the file's database, and more ORM instances on it (closed after the case). */
interface Fixture {
  readonly db: TestDatabase;
  open(overrides?: Partial<Options>): Promise<MikroORM>;
  /** Runs `work` after the case, to release what it held. */
  later(work: () => Promise<unknown>): void;
}

const PROBE = 'driver_error_probe';

/** The error `work` rejects with; a case whose work succeeds fails here. */
async function failureOf(work: Promise<unknown>): Promise<unknown> {
  const outcome = await work.then(
    () => ({ failed: false as const }),
    (error: unknown) => ({ failed: true as const, error }),
  );
  if (!outcome.failed) throw new Error('the statement did not fail');
  return outcome.error;
}

const sql = (em: EntityManager, text: string) => queryRows(em, text, []);
/** What the runtime tells the classifier about a failed COMMIT on `db`. */
const commitOf = (db: TestDatabase): DriverErrorContext => ({
  commit: { canFailAfterApplying: dialectOf(db.orm.em).commitCanFailAfterApplying },
});

/** A transaction of its own on a fresh fork of `orm`'s EntityManager, rolled back after the case. */
async function transactionOn(fixture: Fixture, orm: MikroORM): Promise<EntityManager> {
  const em = orm.em.fork();
  await em.begin();
  fixture.later(() => em.rollback());
  return em;
}

/** The failure of the first statement on an ORM opened with `overrides`, which connects only then. */
async function firstStatementOn(fixture: Fixture, overrides: Partial<Options>): Promise<unknown> {
  const orm = await fixture.open({ ...overrides, connect: false } as Partial<Options>);
  return failureOf(sql(orm.em.fork(), 'select 1'));
}

/**
 * A transaction the runtime holds (its own, as a unit of work's) on an ORM of its own, rolled back after the case:
 * where its connection dies, MikroORM 7's own `em.begin()` would keep the pool's slot and `orm.close()` wait for it.
 */
async function heldTransaction(fixture: Fixture): Promise<EntityManager> {
  const orm = await fixture.open();
  const transaction = await createUnitTransactions().begin(orm.em.fork());
  fixture.later(() => transaction.rollback());
  return transaction.em;
}

/**
 * Ends the session of backend `pid` from another connection of `orm` and waits until it has gone (its FATAL message
 * sent), then makes one more round trip, by whose answer the idle client has read that its socket closed.
 */
async function terminateIdle(orm: MikroORM, pid: number): Promise<void> {
  await sql(orm.em.fork(), `select pg_terminate_backend(${pid})`);
  for (;;) {
    const rows = await sql(orm.em.fork(), `select 1 from pg_stat_activity where pid = ${pid}`);
    if (rows.length === 0) break;
  }
  await sql(orm.em.fork(), 'select 1');
}

/** An ORM on the file's database whose every COMMIT goes through `proxy`, armed to lose the next one's answer. */
async function throughProxy(fixture: Fixture, proxy: CommitDroppingProxy): Promise<MikroORM> {
  const target = new URL(fixture.db.config.clientUrl!);
  const port = await proxy.listen();
  fixture.later(() => proxy.close());
  target.host = `127.0.0.1:${port}`;
  return fixture.open({ clientUrl: target.toString(), pool: { min: 0, max: 1 } } as Partial<Options>);
}

/** An application's subscriber whose `afterTransactionCommit` throws: MikroORM's commit rejects after COMMIT applied. */
class ThrowingAfterCommit implements EventSubscriber {
  afterTransactionCommit(): void {
    throw new Error('audit hook failed');
  }
}

const CASES: readonly KindCase[] = [
  {
    what: 'a flush of a row whose version another transaction changed (OptimisticLockError)',
    kind: 'version conflict',
    on: ['postgresql', 'sqlite'],
    async produce({ db }) {
      const key = uniqueKey('version');
      await new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock: new FakeClock() }).handle(scriptedSaga, { type: 'Start', key });
      const em = db.orm.em.fork();
      const saga = await em.findOneOrFail(ScriptedSaga, { key });
      await executeSql(db.orm.em.fork(), 'update scripted_saga set version = version + 1 where key = ?', [key], 'run');
      saga.counter++;
      return failureOf(em.flush());
    },
  },
  {
    what: 'an update of a row a concurrent transaction changed since this repeatable-read one began (40001)',
    kind: 'deadlock',
    on: ['postgresql'],
    async produce(fixture) {
      const em = await transactionOn(fixture, fixture.db.orm);
      await sql(em, 'set transaction isolation level repeatable read');
      await sql(em, `select * from ${PROBE} where id = 1`);
      await sql(fixture.db.orm.em.fork(), `update ${PROBE} set note = 'theirs' where id = 1`);
      return failureOf(sql(em, `update ${PROBE} set note = 'ours' where id = 1`));
    },
  },
  {
    what: 'an update of a row another transaction holds, past lock_timeout (55P03)',
    kind: 'lock wait',
    on: ['postgresql'],
    async produce(fixture) {
      const holder = await transactionOn(fixture, fixture.db.orm);
      await sql(holder, `select * from ${PROBE} where id = 1 for update`);
      const waiter = await transactionOn(fixture, fixture.db.orm);
      await sql(waiter, "set local lock_timeout = '20ms'");
      return failureOf(sql(waiter, `update ${PROBE} set note = 'waited' where id = 1`));
    },
  },
  {
    what: 'a write to a file another connection holds locked, past the busy timeout (LockWaitTimeoutException)',
    kind: 'lock wait',
    on: ['sqlite'],
    async produce(fixture) {
      const locker = await fixture.open();
      const waiter = await fixture.open();
      await waiter.em.getConnection().execute('pragma busy_timeout = 20');
      await locker.em.getConnection().execute('begin exclusive');
      fixture.later(() => locker.em.getConnection().execute('commit'));
      return failureOf(sql(waiter.em.fork(), `update ${PROBE} set note = 'waited' where id = 1`));
    },
  },
  {
    what: 'an insert of a label another row holds (unique)',
    kind: 'unique violation',
    on: ['postgresql', 'sqlite'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), `insert into ${PROBE} (id, label, note) values (2, 'first', 'x')`)),
  },
  {
    what: 'a select from a table that does not exist',
    kind: 'missing table',
    on: ['postgresql', 'sqlite'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), 'select * from driver_error_nowhere')),
  },
  {
    what: 'a select of a column that does not exist',
    kind: 'missing column',
    on: ['postgresql', 'sqlite'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), `select nowhere from ${PROBE}`)),
  },
  {
    what: 'an insert of null into a not-null column',
    kind: 'refused by the server',
    on: ['postgresql', 'sqlite'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), `insert into ${PROBE} (id, label, note) values (3, null, 'x')`)),
  },
  {
    what: 'a statement with a syntax error',
    kind: 'refused by the server',
    on: ['postgresql', 'sqlite'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), `selec * from ${PROBE}`)),
  },
  {
    what: 'a division by zero (22012, a SQLSTATE MikroORM maps to no class)',
    kind: 'refused by the server',
    on: ['postgresql'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), 'select 1 / 0 as n')),
  },
  {
    what: 'a statement past statement_timeout (57014)',
    kind: 'canceled or out of resources',
    on: ['postgresql'],
    async produce(fixture) {
      const em = await transactionOn(fixture, fixture.db.orm);
      await sql(em, "set local statement_timeout = '20ms'");
      return failureOf(sql(em, 'select pg_sleep(30)'));
    },
  },
  {
    what: 'a connection to a port nothing listens on (ECONNREFUSED)',
    kind: 'connection failure',
    on: ['postgresql'],
    async produce(fixture) {
      const target = new URL(fixture.db.config.clientUrl!);
      target.host = `127.0.0.1:${await closedPort()}`;
      return firstStatementOn(fixture, { clientUrl: target.toString() });
    },
  },
  {
    what: 'a statement whose session the server terminates (pg_terminate_backend, 57P01)',
    kind: 'connection failure',
    on: ['postgresql'],
    async produce(fixture) {
      const em = await heldTransaction(fixture);
      return failureOf(sql(em, 'select pg_terminate_backend(pg_backend_pid())'));
    },
  },
  {
    what: 'a database file that cannot be opened: its path is a directory (ConnectionException)',
    kind: 'connection failure',
    on: ['sqlite'],
    produce: (fixture) => firstStatementOn(fixture, { dbName: tmpdir() }),
  },
  {
    what: 'a statement on a connection whose session the server ended while it was idle',
    kind: 'never sent',
    on: ['postgresql'],
    async produce(fixture) {
      const em = await heldTransaction(fixture);
      const [{ pid }] = (await sql(em, 'select pg_backend_pid() as pid')) as [{ pid: number }];
      await terminateIdle(fixture.db.orm, pid);
      return failureOf(sql(em, 'select 1'));
    },
  },
  {
    what: 'a statement while the pool of one connection is held, past the acquire timeout',
    kind: 'no free connection',
    on: ['postgresql'],
    async produce(fixture) {
      // knex's acquire timeout on MikroORM 6, pg-pool's on 7. It bounds making the holder's connection too: long
      // enough for that on a loaded machine, and the ORM connects only at the holder's first statement.
      const orm = await fixture.open({
        connect: false,
        pool: { min: 0, max: 1, acquireTimeoutMillis: 1000 },
        driverOptions: pgConnectionOptions({ connectionTimeoutMs: 1000 }),
      } as Partial<Options>);
      const holder = await transactionOn(fixture, orm);
      await sql(holder, 'select 1');
      return failureOf(sql(orm.em.fork(), 'select 1'));
    },
  },
  {
    what: 'a COMMIT whose connection was reset once the server applied it (ECONNRESET), told it was the COMMIT',
    kind: 'outcome unknown',
    on: ['postgresql'],
    context: commitOf,
    produce: (fixture) => lostCommit(fixture, 'reset-after-commit'),
  },
  {
    what: 'the same reset COMMIT, not told it was the COMMIT',
    kind: 'connection failure',
    on: ['postgresql'],
    produce: (fixture) => lostCommit(fixture, 'reset-after-commit'),
  },
  {
    // node-postgres reports a closed socket as "Connection terminated unexpectedly", with no code: its message tells
    // it from a subscriber's error, and the outcome is unknown.
    what: 'a COMMIT whose connection was closed once the server applied it (no code), told it was the COMMIT',
    kind: 'outcome unknown',
    on: ['postgresql'],
    context: commitOf,
    produce: (fixture) => lostCommit(fixture, 'drop-after-commit'),
  },
  {
    what: 'the same closed COMMIT, not told it was the COMMIT',
    kind: 'connection failure',
    on: ['postgresql'],
    produce: (fixture) => lostCommit(fixture, 'drop-after-commit'),
  },
  {
    what: 'a transaction whose afterTransactionCommit subscriber throws, told it was the COMMIT',
    kind: 'commit failed outside the database',
    on: ['postgresql', 'sqlite'],
    context: commitOf,
    async produce({ open }) {
      const orm = await open();
      orm.em.getEventManager().registerSubscriber(new ThrowingAfterCommit());
      const error = await failureOf(orm.em.fork().transactional((em) => sql(em, `update ${PROBE} set note = 'hooked' where id = 1`)));
      // As the runtime does with what its COMMIT threw.
      return convertDriverError(orm.em, error as Error);
    },
  },
  {
    what: 'an insert once the file reached max_page_count (SQLITE_FULL)',
    kind: 'database failure',
    on: ['sqlite'],
    async produce({ open }) {
      const orm = await open();
      const em = orm.em.fork();
      const [{ pages }] = (await sql(em, 'select page_count as pages from pragma_page_count()')) as [{ pages: number }];
      await sql(em, `pragma max_page_count = ${Number(pages)}`);
      return failureOf(sql(em, `insert into ${PROBE} (id, label, note) values (4, 'big', '${'x'.repeat(100_000)}')`));
    },
  },
  {
    what: 'an insert naming a column the table lacks (SQLite says "has no column named", which MikroORM maps to no class)',
    kind: 'other',
    on: ['sqlite'],
    produce: ({ db }) => failureOf(sql(db.orm.em.fork(), `insert into ${PROBE} (id, label, nowhere) values (5, 'five', 'x')`)),
  },
  {
    what: 'MikroORM refusing an entity it does not know (not a driver error)',
    kind: 'other',
    on: ['postgresql', 'sqlite'],
    produce: ({ db }) => failureOf(db.orm.em.fork().find('NoSuchEntity', {})),
  },
];

/**
 * Commits a write through the runtime's own transaction on an ORM behind a proxy that loses COMMIT's answer by
 * `fault`; the error as the runtime sees it. (MikroORM 7's `em.transactional` does not settle when the connection
 * drops there.)
 */
async function lostCommit(fixture: Fixture, fault: 'drop-after-commit' | 'reset-after-commit'): Promise<unknown> {
  const server = new URL(fixture.db.config.clientUrl!);
  const proxy = new CommitDroppingProxy(server.hostname, Number(server.port || 5432));
  const orm = await throughProxy(fixture, proxy);
  proxy.arm(fault);
  const error = await failedCommit(fixture, orm);
  await proxy.faulted;
  return error;
}

/** Writes a row in the runtime's own transaction on `orm` and commits; the error COMMIT failed with, converted as the runtime does. */
async function failedCommit(fixture: Fixture, orm: MikroORM): Promise<unknown> {
  const transaction = await createUnitTransactions().begin(orm.em.fork());
  fixture.later(() => transaction.rollback());
  await executeSql(transaction.em, `update ${PROBE} set note = 'committed' where id = 1`, [], 'run');
  const error = await failureOf(transaction.commit());
  return convertDriverError(orm.em, error as Error);
}

for (const dialect of DIALECTS) {
  describe(`what each database error is (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    const releases: (() => Promise<unknown>)[] = [];
    const fixture = (): Fixture => ({
      db: db(),
      async open(overrides = {}) {
        const orm = await MikroORM.init({ ...db().config, ...overrides } as Options);
        opened.push(orm);
        return orm;
      },
      later: (work) => releases.push(work),
    });
    beforeAll(async () => {
      const em = db().orm.em.fork();
      await sql(em, `create table ${PROBE} (id integer primary key, label varchar(20) not null unique, note text)`);
      await sql(em, `insert into ${PROBE} (id, label, note) values (1, 'first', 'x')`);
    });
    afterEach(async () => {
      for (const release of releases.splice(0).reverse()) await release().catch(() => undefined);
      for (const orm of opened.splice(0)) await orm.close(true);
    });

    for (const { what, kind, context, produce } of CASES.filter((c) => c.on.includes(sagaDialectOf(dialect)))) {
      it(`${what}: ${kind}`, async () => {
        const error = await produce(fixture());
        expect(classifyDriverError(error, context?.(db())), String(error)).toBe(kind);
      });
    }
  });
}
