// Persistence failures on every database: typed, classified truthfully, and never leaking values.
import { createServer, type Server } from 'node:net';
import { defineEntity, type EntityManager, MikroORM, type Options } from '@mikro-orm/core';
import { afterAll, describe, expect, it } from 'vitest';
import { defineSaga, SagaPersistenceError, SagaRuntime, SagaSchemaError, SagaState, SagaStateSchema } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { pgConnectionOptions } from '../../src/orm/connection-info.js';
import { isDriverException } from '../../src/orm/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { closedPort } from '../support/closed-port.js';
import { connectionOptions, createTestDatabase, DIALECTS, isSqlite, type TestDatabase } from '../support/databases.js';
import { refuseInserts, rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** A saga with a second unique business column: a duplicate there is no race. */
class MemberSaga extends SagaState {
  memberKey!: string;
  email: string | null = null;
}

const MemberSagaSchema = defineEntity({
  class: MemberSaga,
  extends: SagaStateSchema,
  tableName: 'member_saga',
  properties: {
    memberKey: { type: 'string', length: 100, fieldName: 'member_key', unique: true },
    email: { type: 'string', length: 200, fieldName: 'email', unique: 'member_saga_email_uniq', nullable: true },
  },
});

type MemberMessage =
  | { readonly type: 'Join'; readonly memberKey: string; readonly email: string }
  | { readonly type: 'ChangeEmail'; readonly memberKey: string; readonly email: string };

const memberSaga = defineSaga<MemberSaga, MemberMessage>({
  name: 'member',
  state: MemberSaga,
  correlation: { property: 'memberKey', from: (m) => m.memberKey },
  startedBy: ['Join'],
  steps: {
    Join(saga, m) {
      saga.email = m.email;
    },
    ChangeEmail(saga, m) {
      saga.email = m.email;
    },
  },
});

// A value that must never appear in an error message: the driver's error quotes it with the SQL.
const SECRET = 'card-4111-1111-1111-1111';

for (const dialect of DIALECTS) {
  describe(`persistence failures (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, MemberSagaSchema]);
    const setup = () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga, memberSaga], clock: new FakeClock() });
      return { runtime, rows: rowsOf(db().orm) };
    };

    describe('a deterministic duplicate fails at once, typed, and names the constraint', () => {
      it('a new instance whose business column duplicates another row: UNIQUE_VIOLATION, one attempt, no row', async () => {
        const { runtime } = setup();
        const email = `${SECRET}-new@example.com`;
        await runtime.handle(memberSaga, { type: 'Join', memberKey: uniqueKey('m'), email });
        const key = uniqueKey('m');
        const error = await runtime.handle(memberSaga, { type: 'Join', memberKey: key, email }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SagaPersistenceError);
        expect(error).toMatchObject({ code: 'UNIQUE_VIOLATION', details: { operation: 'insert', table: 'member_saga' } });
        expect(runtime.stats().concurrencyConflicts).toBe(0);
        const message = (error as Error).message;
        expect(message).not.toContain(SECRET);
        expect(message).toContain('insert on member_saga');
        if (dialect === 'postgresql') expect(message).toContain('member_saga_email_uniq');
        // The driver's error stays as the cause (MikroORM 6's message quotes the SQL and its values; 7's does not).
        expect(isDriverException((error as Error).cause)).toBe(true);
        expect(await db().orm.em.fork().count(MemberSaga, { memberKey: key })).toBe(0);
      });

      it('an update that takes another row’s unique value: UNIQUE_VIOLATION at once, version unchanged', async () => {
        const { runtime } = setup();
        const taken = `${SECRET}-taken@example.com`;
        await runtime.handle(memberSaga, { type: 'Join', memberKey: uniqueKey('m'), email: taken });
        const key = uniqueKey('m');
        await runtime.handle(memberSaga, { type: 'Join', memberKey: key, email: 'free@example.com' });
        const error = await runtime.handle(memberSaga, { type: 'ChangeEmail', memberKey: key, email: taken }).catch((e: unknown) => e);
        expect(error).toMatchObject({ code: 'UNIQUE_VIOLATION', details: { operation: 'update', table: 'member_saga' } });
        expect((error as Error).message).not.toContain(SECRET);
        expect(runtime.stats().concurrencyConflicts).toBe(0);
        expect(await db().orm.em.fork().findOne(MemberSaga, { memberKey: key })).toMatchObject({ version: 0, email: 'free@example.com' });
      });
    });

    it('a failed outbox write does not put the payload (60 KB) in the message', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('leak');
      const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
      const allowInserts = await refuseInserts(db().orm, 'saga_outbox', 'message_type', 'Refused');
      try {
        const payload = { type: 'Refused', card: SECRET, blob: 'x'.repeat(60_000) };
        const error = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: payload }] })
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SagaPersistenceError);
        expect(error).toMatchObject({ code: 'PERSISTENCE_FAILED', details: { operation: 'insert', table: 'saga_outbox' } });
        const message = (error as Error).message;
        expect(message).not.toContain(SECRET);
        expect(message).not.toMatch(/insert into|xxxx/i);
        expect(message.length).toBeLessThan(1_000);
        expect(message).toContain('rolled back, so nothing of it was written');
        // The driver's error stays as the cause (MikroORM 6's message quotes the SQL and its values; 7's does not).
        expect(isDriverException((error as Error).cause)).toBe(true);
        expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
        expect(await rows.outbox(started.sagaId!)).toEqual([]);
      } finally {
        await allowInserts();
      }
    });

    describe('a missing table or column is SCHEMA_INVALID, naming it and the command that creates it', () => {
      /** A database of its own, broken by `ddl`, and a runtime on it. */
      const brokenDatabase = async (test: (runtime: SagaRuntime, scratch: TestDatabase) => Promise<void>, ddl?: string) => {
        const scratch = await createTestDatabase(dialect, [ScriptedSaga]);
        try {
          if (ddl) await scratch.orm.em.getConnection().execute(ddl);
          // The start-up schema check would name the problem first: these tests are about the unit of work's own report.
          await test(new SagaRuntime({ em: scratch.orm.em, sagas: [scriptedSaga], clock: new FakeClock(), verifySchema: false }), scratch);
        } finally {
          await scratch.dispose();
        }
      };

      it('the saga table is missing: the initial read fails typed', async () => {
        await brokenDatabase(async (runtime) => {
          const error = await runtime.handle(scriptedSaga, { type: 'Start', key: 'k' }).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(SagaSchemaError);
          expect(error).toMatchObject({ code: 'SCHEMA_INVALID', details: { operation: 'read', table: 'scripted_saga' } });
          expect((error as Error).message).toContain('table scripted_saga does not exist');
          expect((error as Error).message).toContain('npx mikro-orm migration:create');
          expect((error as Error).message).toContain('ScriptedSaga');
        }, 'drop table scripted_saga');
      });

      it('a column of the saga table is missing: named', async () => {
        await brokenDatabase(async (runtime) => {
          const error = await runtime.handle(scriptedSaga, { type: 'Start', key: 'k' }).catch((e: unknown) => e);
          expect(error).toMatchObject({ code: 'SCHEMA_INVALID', details: { table: 'scripted_saga', missingColumns: ['counter'] } });
          expect((error as Error).message).toContain('lacks column(s) counter');
        }, 'alter table scripted_saga drop column counter');
      });

      it('saga_timer is missing: the write fails typed, names the library migrations, and the state change is rolled back', async () => {
        await brokenDatabase(async (runtime, scratch) => {
          await runtime.handle(scriptedSaga, { type: 'Start', key: 'k' });
          await scratch.orm.em.getConnection().execute('drop table saga_timer');
          const error = await runtime
            .handle(scriptedSaga, { type: 'Do', key: 'k', actions: [{ op: 'inc' }, { op: 'schedule', name: 't' }] })
            .catch((e: unknown) => e);
          expect(error).toBeInstanceOf(SagaSchemaError);
          expect(error).toMatchObject({ code: 'SCHEMA_INVALID', details: { table: 'saga_timer' } });
          expect((error as Error).message).toContain('table saga_timer does not exist');
          expect((error as Error).message).toContain('SAGA_MIGRATIONS');
          expect(await scratch.orm.em.fork().findOne(ScriptedSaga, { key: 'k' })).toMatchObject({ version: 0, counter: 0 });
        });
      });
    });
  });
}

describe('an unreachable database is DATABASE_UNREACHABLE, naming where and how long it waited', () => {
  const servers: Server[] = [];
  afterAll(() => {
    for (const server of servers) server.close();
  });
  /** A port that accepts connections and never answers: the driver's connect timeout runs out. */
  async function silentPort(): Promise<number> {
    const server = createServer(() => undefined);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return (server.address() as { port: number }).port;
  }
  /** What `call` rejects with, on an ORM that has not connected yet. */
  async function failureOn(options: Options, call: (em: EntityManager) => Promise<unknown>) {
    const orm = await MikroORM.init({
      entities: [ScriptedSaga, ...(await import('../../src/index.js')).SAGA_ENTITIES],
      connect: false,
      allowGlobalContext: false,
      ...options,
    } as Options);
    try {
      return await call(orm.em).catch((e: unknown) => e);
    } finally {
      await orm.close(true);
    }
  }
  const handleOn = (options: Options) =>
    failureOn(options, (em) =>
      new SagaRuntime({ em, sagas: [scriptedSaga], clock: new FakeClock() }).handle(scriptedSaga, { type: 'Start', key: 'k' }),
    );

  it('postgresql: connection refused names host and port, never the password', async () => {
    const { PostgreSqlDriver } = await import('@mikro-orm/postgresql');
    const port = await closedPort();
    const error = await handleOn({ driver: PostgreSqlDriver, clientUrl: `postgres://saga:hunter2@127.0.0.1:${port}/app` });
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect(error).toMatchObject({ code: 'DATABASE_UNREACHABLE', details: { operation: 'read', table: 'scripted_saga' } });
    const message = (error as Error).message;
    expect(message).toContain(`PostgreSQL at 127.0.0.1:${port} (database 'app')`);
    expect(message).toMatch(/after waiting \d+ ms/);
    expect(message).toContain('Nothing was written');
    expect(message).not.toContain('hunter2');
  });

  it('postgresql: an operator call on a refused connection is DATABASE_UNREACHABLE too, never the password', async () => {
    const { PostgreSqlDriver } = await import('@mikro-orm/postgresql');
    const port = await closedPort();
    const error = await failureOn({ driver: PostgreSqlDriver, clientUrl: `postgres://saga:hunter2@127.0.0.1:${port}/app` }, (em) =>
      new SagaOperations({ em, sagas: [scriptedSaga] }).listSagas({ sagaType: 'scripted', limit: 1 }),
    );
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect(error).toMatchObject({ code: 'DATABASE_UNREACHABLE', details: { operation: 'listSagas' } });
    expect((error as Error).message).not.toContain('hunter2');
  });

  it('postgresql: a connect timeout says how long it waited', async () => {
    const { PostgreSqlDriver } = await import('@mikro-orm/postgresql');
    const port = await silentPort();
    const error = await handleOn({
      driver: PostgreSqlDriver,
      clientUrl: `postgres://saga@127.0.0.1:${port}/app`,
      driverOptions: pgConnectionOptions({ connectionTimeoutMs: 200 }),
    });
    expect(error).toMatchObject({ code: 'DATABASE_UNREACHABLE' });
    const waited = Number(/after waiting (\d+) ms/.exec((error as Error).message)?.[1]);
    expect(waited).toBeGreaterThanOrEqual(190);
    expect((error as SagaPersistenceError).details.waitedMs).toBe(waited);
  });

  for (const dialect of DIALECTS.filter(isSqlite))
    it(`${dialect}: a database file that cannot be opened is named`, async () => {
      const file = '/nonexistent-saga-dir/app.sqlite';
      const error = await handleOn({ driver: connectionOptions(dialect, file, []).driver, dbName: file });
      expect(error).toMatchObject({ code: 'DATABASE_UNREACHABLE' });
      expect((error as Error).message).toContain(`the SQLite database '${file}'`);
    });
});
