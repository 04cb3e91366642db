// A loop waiting after an empty pass claims at once the rows a runtime on another ORM instance (another process, as
// far as the database can tell) commits due at once: that runtime sends NOTIFY on the library tables' channel after
// its commit, and the dispatcher LISTENs on a connection of its own (PostgreSQL). `listen: false` and the runtime's
// `notifyDispatchers: false` turn either side off; the rows then wait for the poll. A lost connection is logged and
// opened again with the loop's backoff. Time only moves when a test moves the clock.
import type { EntityMetadata, MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, type SagaLogger, SagaOutbox, SagaRuntime, silentLogger } from '../../../src/index.js';
import { dispatcherChannel } from '../../../src/sql/notification-statements.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { statementsSent } from '../../support/pg-statements.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 10_000;

/** A saga that sends `type` at once. */
const sending = (type: string) => ({
  type: 'Start' as const,
  key: uniqueKey('listen'),
  actions: [{ op: 'send' as const, message: { type } }],
});

/** The sessions of the current database whose last statement was a LISTEN. */
async function listeningSessions(orm: MikroORM): Promise<number> {
  const [row] = await orm.em
    .getConnection()
    .execute<{ n: string }[]>("select count(*) as n from pg_stat_activity where datname = current_database() and query ilike 'listen %'");
  return Number(row!.n);
}

describe('commits of another ORM instance wake a waiting loop through LISTEN/NOTIFY (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const stops: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const stop of stops.splice(0)) await stop();
  });

  /**
   * A dispatcher on the file's ORM, waiting after its first empty pass (and listening, unless `listen: false`), and a
   * runtime on an ORM instance of its own (its own pool and sessions), both on `clock`.
   */
  async function setup(options: { listen?: boolean; notifyDispatchers?: boolean; logger?: SagaLogger } = {}) {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const published: OutboxEnvelope[] = [];
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: options.logger ?? silentLogger,
      pollIntervalMs: POLL_MS,
      listen: options.listen,
      publish: async (envelope) => void published.push(envelope),
    });
    stops.push(() => dispatcher.stop());
    const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
    const listening = new Promise<void>((resolve) => dispatcher.on('listening', resolve));
    dispatcher.start();
    await Promise.all([idle, options.listen === false ? undefined : listening]);
    const other = await db().openAnother();
    const elsewhere = new SagaRuntime({ em: other.em, sagas: [scriptedSaga], clock, notifyDispatchers: options.notifyDispatchers });
    const publishedNext = () => new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));
    return { clock, published, dispatcher, other, elsewhere, publishedNext };
  }

  it('a message the other instance commits is published at once, the clock not moving', async () => {
    const { clock, published, elsewhere, publishedNext } = await setup();
    const at = clock.now().getTime();
    const relayed = publishedNext();
    await elsewhere.handle(scriptedSaga, sending('FromElsewhere'));
    await relayed;
    expect(published.map((envelope) => envelope.type)).toEqual(['FromElsewhere']);
    expect(clock.now().getTime()).toBe(at);
    expect((await rowsOf(db().orm).outbox()).filter((row) => row.messageType === 'FromElsewhere')).toMatchObject([
      { outcome: 'published' },
    ]);
  });

  it('a timer the other instance schedules due at once fires at once, the clock not moving', async () => {
    const { clock, dispatcher, elsewhere } = await setup();
    const at = clock.now().getTime();
    const fired = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.timers.fired > 0 && resolve()));
    const started = await elsewhere.handle(scriptedSaga, {
      type: 'Start',
      key: uniqueKey('listen'),
      actions: [{ op: 'schedule', name: 'now', after: 0 }],
    });
    await fired;
    expect(clock.now().getTime()).toBe(at);
    expect(await rowsOf(db().orm).timers({ sagaId: (started as { sagaId: string }).sagaId })).toMatchObject([{ outcome: 'fired' }]);
  });

  it('listen: false holds no LISTEN session, and the message waits for the poll', async () => {
    const { clock, published, elsewhere, publishedNext } = await setup({ listen: false });
    expect(await listeningSessions(db().orm)).toBe(0);
    await elsewhere.handle(scriptedSaga, sending('Polled'));
    expect(published).toEqual([]);
    const relayed = publishedNext();
    clock.advance(POLL_MS);
    await relayed;
    expect(published.map((envelope) => envelope.type)).toEqual(['Polled']);
  });

  it('a runtime with notifyDispatchers: false sends no NOTIFY: its message waits until another wake', async () => {
    const { published, other, elsewhere, publishedNext } = await setup({ notifyDispatchers: false });
    const notifying = new SagaRuntime({ em: other.em, sagas: [scriptedSaga], clock: elsewhere.options.clock });
    const relayed = publishedNext();
    const sent = await statementsSent(async () => {
      await elsewhere.handle(scriptedSaga, sending('Quiet'));
      expect(published).toEqual([]);
      // A NOTIFY of the quiet runtime would have gone before this unit of work began.
      await notifying.handle(scriptedSaga, sending('Loud'));
      await relayed;
    });
    expect(sent.filter((sql) => sql.includes('pg_notify'))).toHaveLength(1);
    expect(published.map((envelope) => envelope.type).sort()).toEqual(['Loud', 'Quiet']);
  });

  it('a terminated LISTEN session is logged once, opened again after the backoff, and wakes the loop again', async () => {
    const warnings: string[] = [];
    const fields: (Record<string, unknown> | undefined)[] = [];
    const warned = deferred();
    const logger: SagaLogger = {
      ...silentLogger,
      warn: (message, given) => {
        warnings.push(message);
        fields.push(given);
        warned.resolve();
      },
    };
    const { clock, published, dispatcher, elsewhere, publishedNext } = await setup({ logger });
    const listeningAgain = new Promise<void>((resolve) => dispatcher.on('listening', resolve));
    await db()
      .orm.em.getConnection()
      .execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and query ilike 'listen %'");
    await warned.promise;
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toBe('dispatcher: lost its LISTEN connection; polling meanwhile, opening it again after a backoff');
    expect(fields[0]).toMatchObject({ retryInMs: 10_000, error: expect.any(String) });
    // The first wait of the loop's backoff is the poll interval.
    clock.advance(POLL_MS);
    await listeningAgain;
    const at = clock.now().getTime();
    const relayed = publishedNext();
    await elsewhere.handle(scriptedSaga, sending('AfterReopen'));
    await relayed;
    expect(published.map((envelope) => envelope.type)).toEqual(['AfterReopen']);
    expect(clock.now().getTime()).toBe(at);
    expect(warnings).toHaveLength(1);
  });

  it('stop() closes the LISTEN session', async () => {
    const { dispatcher } = await setup();
    expect(await listeningSessions(db().orm)).toBe(1);
    await dispatcher.stop();
    expect(await listeningSessions(db().orm)).toBe(0);
  });

  it("the channel is the outbox table's schema-qualified name, and differs for other table names", async () => {
    const rename = (table: string, schema?: string) => (meta: EntityMetadata) => {
      if (meta.class !== SagaOutbox) return;
      meta.tableName = table;
      if (schema) meta.schema = schema;
    };
    const channelOf = (orm: MikroORM) => dispatcherChannel(new SagaRuntime({ em: orm.em, sagas: [], verifySchema: false }).context);
    const renamed = await db().openAnother({ discovery: { onMetadata: rename('app_outbox') } });
    const qualified = await db().openAnother({ discovery: { onMetadata: rename('app_outbox', 'billing') } });
    const long = await db().openAnother({ discovery: { onMetadata: rename('outbox_'.repeat(8), 'a_schema_with_a_long_name') } });
    expect(channelOf(db().orm)).toBe('mikro_orm_saga:saga_outbox');
    expect(channelOf(renamed)).toBe('mikro_orm_saga:app_outbox');
    expect(channelOf(qualified)).toBe('mikro_orm_saga:billing.app_outbox');
    expect(channelOf(long)).toMatch(/^mikro_orm_saga:[0-9a-f]{48}$/);
    expect(Buffer.byteLength(channelOf(long))).toBe(63);
  });
});

describe('LISTEN/NOTIFY options on SQLite', () => {
  const db = useDatabase('sqlite', [ScriptedSaga]);

  it('listen and notifyDispatchers are accepted and change nothing: no listening, in-process wakes as before', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock, notifyDispatchers: true });
    const published: string[] = [];
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: silentLogger,
      pollIntervalMs: POLL_MS,
      listen: true,
      publish: async (envelope) => void published.push(envelope.type),
    });
    const events: string[] = [];
    dispatcher.on('listening', () => events.push('listening'));
    const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
    dispatcher.start();
    await idle;
    const relayed = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));
    await runtime.handle(scriptedSaga, sending('OnSqlite'));
    await relayed;
    await dispatcher.stop();
    expect(published).toEqual(['OnSqlite']);
    expect(events).toEqual([]);
  });
});
