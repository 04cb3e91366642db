// The dispatcher under faults, on every database. An undecodable row is retired alone; a lease holds while its
// delivery runs; a slow delivery does not stall the rest; a database fault is not charged as an attempt; stop() is
// bounded; a failed pass still reports what its catch-up stamped. Process-level cases (a delivery that kills its
// process, several SQLite processes) are in test/reliability/. Time only moves when a test advances the fake clock.
import { randomUUID } from 'node:crypto';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import type { MikroORM, Options } from '@mikro-orm/core';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type DispatcherEvents,
  type OutboxEnvelope,
  SagaDispatcher,
  type SagaDispatcherOptions,
  SagaOutbox,
  SagaPersistenceError,
  SagaRuntime,
  SagaTimer,
  silentLogger,
} from '../../src/index.js';
import { pgConnectionOptions } from '../../src/orm/connection-info.js';
import { LEASE_EXPIRED_ERROR } from '../../src/sql/dispatch-tables.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite, type TestDatabase, waitsForLocksSynchronously } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';
import { CommitDroppingProxy } from '../support/tcp-proxy.js';

/** The next time `dispatcher` reports `event`. */
function next<K extends keyof DispatcherEvents>(dispatcher: SagaDispatcher, event: K): Promise<Parameters<DispatcherEvents[K]>> {
  return new Promise((resolve) => {
    const off = dispatcher.on(event, ((...args: Parameters<DispatcherEvents[K]>) => {
      off();
      resolve(args);
    }) as DispatcherEvents[K]);
  });
}

/** Lets pending promise callbacks and I/O callbacks run, without waiting on any clock. */
async function flushCallbacks(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** A TCP proxy to PostgreSQL that can be told to stop answering: it then swallows what it receives. */
async function silenceableProxy(url: string): Promise<{ url: string; silence(): void; close(): Promise<void> }> {
  const target = new URL(url);
  const sockets = new Set<Socket>();
  let silent = false;
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('error', () => undefined);
    if (silent) return;
    const upstream = netConnect(Number(target.port || 5432), target.hostname);
    sockets.add(upstream);
    upstream.on('error', () => undefined);
    client.on('data', (chunk) => {
      if (!silent) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!silent) client.write(chunk);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(address.port);
  return {
    url: proxied.toString(),
    silence: () => {
      silent = true;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

for (const dialect of DIALECTS) {
  describe(`dispatcher under faults (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
      expect(running, 'a dispatcher was left running').toEqual([]);
    });
    const dispatcherFor = (runtime: SagaRuntime, options: Partial<SagaDispatcherOptions> = {}) => {
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false }, ...options });
      dispatchers.push(dispatcher);
      return dispatcher;
    };
    /** A fresh clock, a seeding runtime, the row readers, and no rows left over from earlier tests. */
    const fresh = async () => {
      const em = db().orm.em.fork();
      await em.nativeDelete(SagaTimer, {});
      await em.nativeDelete(SagaOutbox, {});
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const start = async (actions: Action[]) => {
        const key = uniqueKey('f');
        const result = await seeding.handle(scriptedSaga, { type: 'Start', key, actions });
        return { key, sagaId: result.sagaId! };
      };
      return {
        clock,
        start,
        rows: rowsOf(db().orm),
        execute: (sql: string, params: unknown[] = []) => em.getConnection().execute(sql, params),
      };
    };
    /** Another MikroORM instance on the test database (closed with it). */
    const anotherOrm = (overrides: Partial<Options> = {}): Promise<MikroORM> => db().openAnother(overrides);

    describe('a row that cannot be decoded is handled alone', () => {
      it('an undecodable timer and outbox row are dead-lettered alone with a reason that does not quote them; nothing else is charged', async () => {
        const { clock, start, rows, execute } = await fresh();
        const published: OutboxEnvelope[] = [];
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
        const dispatcher = dispatcherFor(runtime, { publish: async (envelope) => void published.push(envelope) });
        const { key, sagaId } = await start([
          { op: 'schedule', name: 'before', after: 0 },
          { op: 'schedule', name: 'broken', after: 1 },
          { op: 'schedule', name: 'after', after: 2 },
          { op: 'send', message: { type: 'Good' } },
          { op: 'send', message: { type: 'Mangled' } },
        ]);
        const [broken] = await rows.timers({ sagaId, name: 'broken' });
        const mangled = (await rows.outbox(sagaId)).find((o) => o.messageType === 'Mangled')!;
        // SQLite keeps JSON as text, so a truncated write survives; PostgreSQL's jsonb only holds valid JSON,
        // but not necessarily an object.
        if (isSqlite(dialect)) {
          await execute(`update "saga_timer" set "payload" = '{"type":"Tick","label":"secret-value' where "id" = ?`, [broken!.id]);
          await execute(`update "saga_outbox" set "headers" = 'secret-value, not json' where "id" = ?`, [mangled.id]);
        } else {
          await execute(`update "saga_timer" set "payload" = '"secret-value"'::jsonb where "id" = ?`, [broken!.id]);
          await execute(`update "saga_outbox" set "headers" = '["secret-value"]'::jsonb where "id" = ?`, [mangled.id]);
        }
        clock.advance(10);

        const pass = await dispatcher.runOnce();
        expect(pass.timers).toMatchObject({ claimed: 3, fired: 2, failed: 0, deadLettered: 1, interrupted: 0 });
        expect(pass.outbox).toMatchObject({ claimed: 2, published: 1, failed: 0, deadLettered: 1 });
        expect(published.map((e) => e.type)).toEqual(['Good']);
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:before;tick:after;' });

        const timers = await rows.timers({ sagaId });
        const dead = timers.find((t) => t.name === 'broken')!;
        expect(dead).toMatchObject({ outcome: 'dead_lettered', attempts: 0, lockedUntil: null });
        expect(dead.deadLetterReason).toMatch(
          isSqlite(dialect) ? /^cannot be decoded: payload is not valid JSON/ : /^cannot be decoded: payload is JSON but not an object/,
        );
        expect(dead.lastError).toMatch(/^Undecodable: /);
        const deadOutbox = (await rows.outbox(sagaId)).find((o) => o.id === mangled.id)!;
        expect(deadOutbox).toMatchObject({ outcome: 'dead_lettered', attempts: 0 });
        expect(deadOutbox.deadLetterReason).toMatch(/^cannot be decoded: headers /);
        for (const text of [dead.deadLetterReason, dead.lastError, deadOutbox.deadLetterReason, deadOutbox.lastError]) {
          expect(text).not.toContain('secret-value');
        }
        // The healthy rows were delivered once and never charged.
        expect(timers.filter((t) => t.name !== 'broken').map((t) => [t.name, t.outcome, t.attempts, t.lastError])).toEqual([
          ['after', 'fired', 0, null],
          ['before', 'fired', 0, null],
        ]);
        expect((await dispatcher.runOnce()).timers.claimed).toBe(0);
      });
    });

    describe('a lease holds while its delivery runs', () => {
      it('a delivery running past leaseMs (within its timeout) keeps its lease, and so does the row waiting its turn: a second dispatcher takes neither', async () => {
        const { clock, start, rows } = await fresh();
        const gate = deferred();
        const entered = deferred();
        const slow = scriptedSagaWithTick(async (saga, message) => {
          if (message.label === 'slow') {
            entered.resolve();
            await gate.promise;
          }
          saga.log += `tick:${message.label};`;
        });
        const holder = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [slow], clock }), {
          leaseMs: 30_000,
          deliveryTimeoutMs: 60_000,
          concurrency: 1,
        });
        const other = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }), { leaseMs: 30_000 });
        const first = await start([{ op: 'schedule', name: 'slow', after: 0 }]);
        const second = await start([{ op: 'schedule', name: 'queued', after: 1 }]);
        clock.advance(1);

        const holding = holder.runOnce();
        await entered.promise;
        // 50 s of the clock, renewal by renewal: 20 s past the lease the claim started with.
        for (let step = 0; step < 5; step++) {
          const renewed = next(holder, 'renewed');
          clock.advance(10_000);
          const [renewal] = await renewed;
          expect(renewal.lost).toEqual([]);
          expect(renewal.renewed).toHaveLength(2);
          expect(renewal.leaseUntil).toEqual(new Date(clock.now().getTime() + 30_000));
        }
        expect((await other.runOnce()).timers.claimed).toBe(0);
        gate.resolve();
        expect((await holding).timers).toMatchObject({ claimed: 2, fired: 2, failed: 0, lost: 0 });
        expect(await rows.saga(first.key)).toMatchObject({ log: 'started;tick:slow;' });
        expect(await rows.saga(second.key)).toMatchObject({ log: 'started;tick:queued;' });
        const timers = [...(await rows.timers({ sagaId: first.sagaId })), ...(await rows.timers({ sagaId: second.sagaId }))];
        expect(timers.map((t) => [t.name, t.outcome, t.attempts, t.lastError])).toEqual([
          ['slow', 'fired', 0, null],
          ['queued', 'fired', 0, null],
        ]);
      });

      it('an outbox lane stops publishing a row whose lease was lost meanwhile', async () => {
        const { clock, start, execute } = await fresh();
        const gate = deferred();
        const entered = deferred();
        const published: string[] = [];
        const dispatcher = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }), {
          leaseMs: 30_000,
          publish: async (envelope) => {
            published.push(envelope.type);
            if (envelope.type === 'First') {
              entered.resolve();
              await gate.promise;
            }
          },
        });
        const { sagaId } = await start([
          { op: 'send', message: { type: 'First' } },
          { op: 'send', message: { type: 'Second' } },
        ]);
        const second = (await rowsOf(db().orm).outbox(sagaId)).find((o) => o.messageType === 'Second')!;

        const passing = dispatcher.runOnce();
        await entered.promise;
        // Another dispatcher took 'Second' over (as after a lease that ran out while the database was away).
        await execute(`update "saga_outbox" set "token" = ? where "id" = ?`, [randomUUID(), second.id]);
        const renewed = next(dispatcher, 'renewed');
        clock.advance(10_000);
        const [renewal] = await renewed;
        expect(renewal).toMatchObject({ table: 'saga_outbox', lost: [second.id] });
        gate.resolve();
        expect((await passing).outbox).toMatchObject({ claimed: 2, published: 1, lost: 1, failed: 0 });
        expect(published).toEqual(['First']);
      });
    });

    describe('a slow or hung delivery does not stall the rest', () => {
      it('a suspect (LeaseExpired) row waiting to run alone behind a hung delivery does not stop other claims', async () => {
        const { clock, start, rows } = await fresh();
        const gate = deferred();
        const entered = deferred();
        const step = scriptedSagaWithTick(async (saga, message) => {
          if (message.label === 'hang') {
            entered.resolve();
            await gate.promise;
          }
          saga.log += `tick:${message.label};`;
        });
        const dispatcher = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [step], clock }), {
          clock,
          concurrency: 5,
          pollIntervalMs: 1_000,
          deliveryTimeoutMs: 60_000,
        });
        await start([{ op: 'schedule', name: 'x', after: 0, message: { type: 'Tick', label: 'hang' } }]);
        const suspect = await start([{ op: 'schedule', name: 'suspect', after: 1 }]);
        // Delivered beside a poison that killed its process once: charged, and now delivered alone.
        await db().orm.em.fork().nativeUpdate(SagaTimer, { sagaId: suspect.sagaId }, { attempts: 1, lastError: LEASE_EXPIRED_ERROR });
        const later = await start([{ op: 'schedule', name: 'later', after: 5_000 }]);
        clock.advance(2);
        const firedLater = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.timers.fired > 0 && resolve()));
        dispatcher.start();
        await entered.promise;

        clock.advance(5_000); // 'later' is due, a poll interval passed: the loop overtakes the hung pass
        await firedLater;
        expect((await rows.timers({ sagaId: later.sagaId }))[0]).toMatchObject({ outcome: 'fired', attempts: 0 });
        expect((await rows.timers({ sagaId: suspect.sagaId }))[0]).toMatchObject({ outcome: null });
        const suspectFired = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.timers.fired >= 2 && resolve()));
        gate.resolve();
        await suspectFired;
        expect((await rows.timers({ sagaId: suspect.sagaId }))[0]).toMatchObject({ outcome: 'fired', attempts: 1 });
        await dispatcher.stop();
      });

      it('while one delivery hangs, timers that come due later are claimed and fired, with at most `concurrency` in flight', async () => {
        const { clock, start, rows } = await fresh();
        const gate = deferred();
        const entered = deferred();
        let inFlight = 0;
        let maxInFlight = 0;
        const hanging = scriptedSagaWithTick(async (saga, message) => {
          inFlight++;
          maxInFlight = Math.max(maxInFlight, inFlight);
          try {
            if (message.label === 'hang') {
              entered.resolve();
              await gate.promise;
            }
            saga.log += `tick:${message.label};`;
          } finally {
            inFlight--;
          }
        });
        const dispatcher = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [hanging], clock }), {
          concurrency: 2,
          pollIntervalMs: 1_000,
          deliveryTimeoutMs: 60_000,
        });
        const hung = await start([{ op: 'schedule', name: 'hang', after: 0 }]);
        const healthy = await Promise.all(Array.from({ length: 6 }, () => start([{ op: 'schedule', name: 'ok', after: 5_000 }])));

        let fired = 0;
        const allFired = deferred();
        dispatcher.on('pass', (pass) => {
          fired += pass.timers.fired;
          if (fired >= 6) allFired.resolve();
        });
        dispatcher.start();
        await entered.promise;
        // 5 s later, far inside the hanging delivery's 60 s timeout.
        clock.advance(5_000);
        await allFired.promise;
        for (const saga of healthy) expect(await rows.saga(saga.key)).toMatchObject({ log: 'started;tick:ok;' });
        expect(await rows.saga(hung.key)).toMatchObject({ log: 'started;' });
        expect(maxInFlight).toBeLessThanOrEqual(2);
        gate.resolve();
        await dispatcher.stop();
        expect(await rows.saga(hung.key)).toMatchObject({ log: 'started;tick:hang;' });
        expect(fired).toBe(7);
      });
    });

    describe('infrastructure faults are not the row’s fault', () => {
      it('a delivery whose database write fails (terminated connection / locked file) is given back uncharged and fires later', async () => {
        const { clock, start, rows, execute } = await fresh();
        const application = `saga-fault-${randomUUID().slice(0, 8)}`;
        const dispatcherOrm = await anotherOrm(
          dialect === 'postgresql' ? { driverOptions: pgConnectionOptions({ applicationName: application }) } : {},
        );
        // SQLite waits this long for a lock before SQLITE_BUSY ("database is locked").
        if (isSqlite(dialect)) await dispatcherOrm.em.getConnection().execute('pragma busy_timeout = 20');
        const gate = deferred();
        const entered = deferred();
        const gated = scriptedSagaWithTick(async (saga, message) => {
          entered.resolve();
          await gate.promise;
          saga.log += `tick:${message.label};`;
        });
        const runtime = new SagaRuntime({ em: dispatcherOrm.em, sagas: [gated], clock, concurrency: { maxAttempts: 1 } });
        const dispatcher = dispatcherFor(runtime, { maxAttempts: 2 });
        const { key, sagaId } = await start([{ op: 'schedule', name: 'victim', after: 0 }]);

        const passing = dispatcher.runOnce();
        await entered.promise;
        const lifted = await breakTheDatabase(db(), key, application, execute, gate.resolve);
        const pass = await passing;
        await lifted();
        expect(pass.timers).toMatchObject({ claimed: 1, fired: 0, failed: 0, deadLettered: 0, interrupted: 1 });
        expect(await rows.pendingTimers(sagaId)).toMatchObject([{ name: 'victim', attempts: 0, lastError: null }]);

        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1, failed: 0 });
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:victim;' });
        expect((await rows.timers({ sagaId }))[0]).toMatchObject({ outcome: 'fired', attempts: 0, lastError: null });
      });
      for (const code of ['DATABASE_UNREACHABLE', 'COMMIT_OUTCOME_UNKNOWN'] as const)
        it(`a delivery the runtime fails with ${code} is given back uncharged and fires later`, async () => {
          const { clock, start, rows } = await fresh();
          const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
          const deliver = runtime.deliverTimer.bind(runtime);
          let failures = 0;
          // The runtime's verdict as it raises it when the database is away (the driver error is not the point).
          runtime.deliverTimer = async (timer) => {
            if (failures++ === 0) throw new SagaPersistenceError(code, 'the database went away under the delivery');
            return deliver(timer);
          };
          const dispatcher = dispatcherFor(runtime, { maxAttempts: 2 });
          const { key, sagaId } = await start([{ op: 'schedule', name: 'victim', after: 0 }]);

          expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, failed: 0, deadLettered: 0, interrupted: 1 });
          expect(await rows.pendingTimers(sagaId)).toMatchObject([{ name: 'victim', attempts: 0, lastError: null }]);
          expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1, failed: 0 });
          expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:victim;' });
        });

      if (dialect === 'postgresql')
        it('a connection lost at the delivery’s BEGIN (knex: "Transaction query already complete") is given back uncharged', async () => {
          const { clock, start, rows } = await fresh();
          const url = new URL(db().config.clientUrl as string);
          const proxy = new CommitDroppingProxy(url.hostname, Number(url.port || 5432));
          url.hostname = '127.0.0.1';
          url.port = String(await proxy.listen());
          cleanups.push(() => proxy.close());
          const dispatcherOrm = await anotherOrm({ clientUrl: url.toString() });
          let ticks = 0;
          // The step runs before the unit of work begins its transaction: the next BEGIN on the wire is that one.
          const arming = scriptedSagaWithTick(async (saga, message) => {
            if (ticks++ === 0) proxy.arm('drop-at-begin');
            saga.log += `tick:${message.label};`;
          });
          const runtime = new SagaRuntime({ em: dispatcherOrm.em, sagas: [arming], clock, concurrency: { maxAttempts: 1 } });
          const dispatcher = dispatcherFor(runtime, { maxAttempts: 2 });
          const { key, sagaId } = await start([{ op: 'schedule', name: 'victim', after: 0 }]);

          const pass = await dispatcher.runOnce();
          await proxy.faulted;
          expect(pass.timers).toMatchObject({ claimed: 1, fired: 0, failed: 0, deadLettered: 0, interrupted: 1 });
          expect(await rows.pendingTimers(sagaId)).toMatchObject([{ name: 'victim', attempts: 0, lastError: null }]);
          expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1, failed: 0 });
          expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:victim;' });
        });
    });

    describe('outcomes the database could not take are written later, not charged as a crash', () => {
      /**
       * A dispatcher whose publisher succeeds while the database refuses the next write (the outbox row is
       * locked: SQLITE_BUSY after a 20 ms busy timeout, PostgreSQL's lock_timeout of 50 ms), and what lifts it.
       */
      const publishingIntoAnOutage = async (clock: FakeClock, sagaId: () => string) => {
        const dispatcherOrm = await anotherOrm(
          dialect === 'postgresql' ? { driverOptions: pgConnectionOptions({ serverOptions: '-c lock_timeout=50' }) } : {},
        );
        if (isSqlite(dialect)) await dispatcherOrm.em.getConnection().execute('pragma busy_timeout = 20');
        const locker = await anotherOrm();
        const lockerConnection = locker.em.getConnection();
        const trx = await lockerConnection.begin();
        let publishes = 0;
        const publish = async () => {
          publishes++;
          if (publishes > 1) return;
          // The broker took the message; now the database refuses the dispatcher's writes.
          if (isSqlite(dialect)) await lockerConnection.execute('update "saga_outbox" set "attempts" = "attempts"', [], 'run', trx);
          else await lockerConnection.execute('select 1 from "saga_outbox" where "saga_id" = ? for update', [sagaId()], 'all', trx);
        };
        const runtime = new SagaRuntime({ em: dispatcherOrm.em, sagas: [scriptedSaga], clock });
        const dispatcher = dispatcherFor(runtime, { maxAttempts: 2, publish });
        return { dispatcher, publishes: () => publishes, lift: () => lockerConnection.rollback(trx) };
      };

      it('a message published while the database refuses markPublished is stamped at the next pass: published once, not charged', async () => {
        const { clock, start, rows } = await fresh();
        let sagaId = '';
        const { dispatcher, publishes, lift } = await publishingIntoAnOutage(clock, () => sagaId);
        sagaId = (await start([{ op: 'send', message: { type: 'Hello' } }])).sagaId;

        expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1, failed: 0 });
        await lift();
        expect(await rows.outbox(sagaId)).toMatchObject([{ outcome: null, attempts: 0 }]);
        clock.advance(120_000); // well past the lease and the delivery timeout
        expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
        expect(await rows.outbox(sagaId)).toMatchObject([{ outcome: 'published', attempts: 0, lastError: null, lockedUntil: null }]);
        expect(publishes()).toBe(1);
      });

      it('stop() writes what the database refused earlier', async () => {
        const { clock, start, rows } = await fresh();
        let sagaId = '';
        const { dispatcher, publishes, lift } = await publishingIntoAnOutage(clock, () => sagaId);
        sagaId = (await start([{ op: 'send', message: { type: 'Hello' } }])).sagaId;

        expect((await dispatcher.runOnce()).outbox).toMatchObject({ published: 1 });
        await lift();
        await dispatcher.stop();
        expect(await rows.outbox(sagaId)).toMatchObject([{ outcome: 'published', attempts: 0, lastError: null }]);
        expect(publishes()).toBe(1);
      });
    });

    describe('error text: stored whatever it holds, logged without the driver’s SQL', () => {
      /** A logger that keeps every line, and the fields passed with it (as JSON). */
      const recordingLogger = () => {
        const lines: string[] = [];
        const keep = (message: string, fields?: Record<string, unknown>) =>
          void lines.push(message, ...(fields ? [JSON.stringify(fields)] : []));
        return { lines, logger: { debug: keep, info: keep, warn: keep, error: keep } };
      };

      it('a step error carrying U+0000 and a lone surrogate is charged, then dead-lettered with that error, not a false LeaseExpired', async () => {
        const { clock, start, rows } = await fresh();
        const poison = scriptedSagaWithTick(async () => {
          throw new Error('cannot parse field: got \u0000 at offset 3, cut emoji \ud83d');
        });
        const { lines, logger } = recordingLogger();
        const dispatcher = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [poison], clock }), { maxAttempts: 2, logger });
        const { sagaId } = await start([{ op: 'schedule', name: 'poison', after: 0 }]);

        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, failed: 1, deadLettered: 0 });
        const expected = 'Error: cannot parse field: got \ufffd at offset 3, cut emoji \ufffd';
        expect(await rows.pendingTimers(sagaId)).toMatchObject([{ attempts: 1, lastError: expected, lockedUntil: null }]);
        clock.advance(3_600_000);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, failed: 0, deadLettered: 1 });
        expect((await rows.timers({ sagaId }))[0]).toMatchObject({
          outcome: 'dead_lettered',
          attempts: 2,
          lastError: expected,
          deadLetterReason: `failed 2 time(s), the last with: ${expected}`,
        });
        const logged = lines.join('\n');
        expect(logged).not.toContain('could not be recorded');
        expect(logged).not.toContain('\u0000');
      });

      it('a publisher failing on a MikroORM query: neither last_error nor the log quotes the SQL or its parameters', async () => {
        const { clock, start, rows } = await fresh();
        const brokerOrm = await anotherOrm();
        const { lines, logger } = recordingLogger();
        // A broker table written through MikroORM: the driver error it raises quotes the statement and its values.
        const broker = brokerOrm.em as unknown as { execute(sql: string, params: unknown[]): Promise<unknown> };
        const publish = async () =>
          void (await broker.execute('select * from "no_such_broker_table" where "secret" = ?', ['secret-value']));
        const dispatcher = dispatcherFor(new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }), {
          maxAttempts: 3,
          logger,
          publish,
        });
        const { sagaId } = await start([{ op: 'send', message: { type: 'Relayed' } }]);

        expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, failed: 1, published: 0 });
        const [row] = await rows.outbox(sagaId);
        expect(row).toMatchObject({
          attempts: 1,
          lastError: `TableNotFoundException (${isSqlite(dialect) ? 'SQLITE_ERROR' : '42P01'})`,
        });
        expect(lines).toContain('delivery failed; retried after a backoff');
        expect(lines.some((line) => line.includes('"attempt":1,"maxAttempts":3'))).toBe(true);
        expect(lines.join('\n')).not.toMatch(/secret|no_such_broker_table|select/i);
      });
    });

    describe('bounded and accounted', () => {
      // better-sqlite3 (`@mikro-orm/better-sqlite` on 6, `@mikro-orm/sqlite` on 7) waits for a lock synchronously,
      // freezing the process, so no timer can bound stop() there (docs/timers.md "Stopping, and failed passes";
      // test/transactions/sqlite/drivers.test.ts shows the freeze).
      it.runIf(!waitsForLocksSynchronously(dialect))(
        'stop() resolves after stopTimeoutMs when the database stops answering mid-pass',
        async () => {
          const { clock } = await fresh();
          // Renewed once the database is silenced: the claim it must answer.
          let claimSent = deferred();
          const onQuery = (sql: string) => {
            // The timer claim (on PostgreSQL sent after the planner settings it runs under: claimCounter's test).
            if (/update [`"]saga_timer[`"] set [`"]token[`"] =/.test(sql)) claimSent.resolve();
            return sql;
          };
          let silence: () => Promise<() => Promise<void>>;
          let dispatcherOrm: MikroORM;
          if (dialect === 'postgresql') {
            const proxy = await silenceableProxy(db().config.clientUrl as string);
            cleanups.push(() => proxy.close());
            dispatcherOrm = await anotherOrm({ clientUrl: proxy.url, onQuery });
            silence = async () => {
              proxy.silence();
              return () => proxy.close();
            };
          } else {
            dispatcherOrm = await anotherOrm({ onQuery });
            // The claim waits for the write lock up to the busy timeout: "not answering" for this long.
            await dispatcherOrm.em.getConnection().execute('pragma busy_timeout = 60000');
            const locker = await anotherOrm();
            silence = async () => {
              await locker.em.getConnection().execute('begin exclusive');
              return async () => void (await locker.em.getConnection().execute('commit'));
            };
          }
          const runtime = new SagaRuntime({ em: dispatcherOrm.em, sagas: [scriptedSaga], clock });
          const dispatcher = dispatcherFor(runtime, { pollIntervalMs: 1_000, stopTimeoutMs: 5_000 });
          const idle = next(dispatcher, 'idle');
          // On PostgreSQL its LISTEN connection goes through the proxy too: stop() is not held up by closing it.
          const listening = dialect === 'postgresql' ? next(dispatcher, 'listening') : undefined;
          dispatcher.start();
          await Promise.all([idle, listening]);
          const lift = await silence();
          claimSent = deferred();

          clock.advance(1_000);
          await claimSent.promise;
          let stopped = false;
          const stopping = dispatcher.stop().then(() => {
            stopped = true;
          });
          clock.advance(4_999);
          await flushCallbacks();
          expect(stopped).toBe(false);
          clock.advance(1);
          await stopping;
          expect(dispatcher.running).toBe(false);
          await lift();
        },
      );

      it('a pass that fails after its catch-up committed still reports the timers it stamped missed', async () => {
        const { clock, start, rows, execute } = await fresh();
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
        const dispatcher = dispatcherFor(runtime, { catchUp: { policy: 'skip-beyond-max-age', maxAgeMs: 60_000 } });
        const { sagaId } = await start([
          { op: 'schedule', name: 'ancient', after: 0 },
          { op: 'schedule', name: 'recent', after: 119_000 },
        ]);
        clock.advance(120_000);
        // Claims fail (they replace the token); the catch-up stamp does not touch it.
        if (dialect === 'postgresql') {
          await execute(`create or replace function refuse_claims() returns trigger as $$
            begin raise exception 'claims refused'; end $$ language plpgsql`);
          await execute(
            'create trigger refuse_claims before update of "token" on "saga_timer" for each row execute function refuse_claims()',
          );
        } else {
          await execute(
            `create trigger refuse_claims before update of "token" on "saga_timer" begin select raise(abort, 'claims refused'); end`,
          );
        }
        let error: unknown;
        try {
          error = await dispatcher.runOnce().catch((e: unknown) => e);
        } finally {
          await execute(dialect === 'postgresql' ? 'drop trigger refuse_claims on "saga_timer"' : 'drop trigger refuse_claims');
        }
        expect(error).toMatchObject({
          name: 'SagaDispatchError',
          code: 'DISPATCH_PASS_FAILED',
          result: { timers: { missed: 1, claimed: 0, fired: 0 } },
        });
        expect((error as Error).message).toMatch(/stamping 1 timer\(s\) missed/);
        expect((error as Error).message).not.toContain('claims refused');
        expect((await rows.timers({ sagaId, name: 'ancient' }))[0]).toMatchObject({ outcome: 'missed' });
        expect(dispatcher.stats().timersMissed).toBe(1);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1, missed: 0 });
      });
    });
  });
}

/**
 * Makes the dispatcher's next write fail the way a real outage does, then opens `gate` so the gated step
 * returns and its unit of work writes. PostgreSQL: a row lock makes the write wait, then its backend is
 * terminated (error 57P01). SQLite: another connection holds the file's exclusive lock past the busy
 * timeout (SQLITE_BUSY). Returns what lifts the fault.
 */
async function breakTheDatabase(
  db: TestDatabase,
  key: string,
  application: string,
  execute: (sql: string, params?: unknown[]) => Promise<unknown>,
  openGate: () => void,
): Promise<() => Promise<void>> {
  if (isSqlite(db.dialect)) {
    const locker = await db.openAnother();
    await locker.em.getConnection().execute('begin exclusive');
    openGate();
    return async () => void (await locker.em.getConnection().execute('commit'));
  }
  const holder = new pg.Client({ connectionString: db.config.clientUrl as string });
  await holder.connect();
  await holder.query('begin');
  await holder.query('select 1 from "scripted_saga" where "key" = $1 for update', [key]);
  openGate();
  // Wait (on the database, not on a clock) until the dispatcher's write waits for the row lock, then end it.
  for (let probe = 0; ; probe++) {
    const waiting = (await execute(`select pid from pg_stat_activity where application_name = ? and wait_event_type = 'Lock'`, [
      application,
    ])) as { pid: number }[];
    if (waiting.length > 0) {
      await execute('select pg_terminate_backend(?)', [waiting[0]!.pid]);
      break;
    }
    if (probe > 10_000) throw new Error('the dispatcher never waited for the row lock');
  }
  return async () => {
    await holder.query('rollback');
    await holder.end();
  };
}
