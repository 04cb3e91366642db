// An idle dispatcher's outbox claim marks started, in the claim itself, exactly the deliveries it starts at
// once (the head of each saga's lane, up to `concurrency`), so the failure model still holds: a dispatcher that
// dies then is charged only for the deliveries that had started; the rows waiting in the batch (a saga's
// later rows, rows beyond the free slots, a row delivered alone) are taken over free. Time only moves when a
// test sets a fake clock.
import { describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { LEASE_EXPIRED_ERROR } from '../../src/sql/dispatch-tables.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, useDatabase } from '../support/suite.js';

const LEASE_MS = 30_000;
const DELIVERY_TIMEOUT_MS = 60_000;
const CONCURRENCY = 3;

for (const dialect of DIALECTS) {
  describe(`outbox claim marks the starts it makes (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('marks only the rows that start at once; a dispatcher dying then is charged for those alone', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const send = (n: number) => ({ op: 'send' as const, message: { type: 'Hello', n } });
      // Oldest first: e (its last delivery died with its dispatcher: delivered alone), then a (3 messages),
      // then b, c and d (one each), each a second after the other.
      const sagaIds: Record<string, string> = {};
      for (const [key, count] of [
        ['e', 1],
        ['a', 3],
        ['b', 1],
        ['c', 1],
        ['d', 1],
      ] as const) {
        const result = await seeding.handle(scriptedSaga, {
          type: 'Start',
          key,
          actions: Array.from({ length: count }, (_, n) => send(n)),
        });
        sagaIds[key] = (result as { sagaId: string }).sagaId;
        clock.advance({ seconds: 1 });
      }
      await db()
        .orm.em.getConnection()
        .execute('update saga_outbox set last_error = ? where saga_id = ?', [LEASE_EXPIRED_ERROR, sagaIds.e]);
      const keyOf = (sagaId: string) => Object.keys(sagaIds).find((key) => sagaIds[key] === sagaId);

      // The first dispatcher's publisher hangs: its deliveries in flight are those a crash would lose.
      const gate = deferred();
      const inFlight: OutboxEnvelope[] = [];
      const threeInFlight = deferred();
      const dying = new SagaDispatcher({
        runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }),
        clock,
        logger: silentLogger,
        batchSize: 10,
        concurrency: CONCURRENCY,
        leaseMs: LEASE_MS,
        deliveryTimeoutMs: DELIVERY_TIMEOUT_MS,
        publish: async (envelope) => {
          inFlight.push(envelope);
          if (inFlight.length === CONCURRENCY) threeInFlight.resolve();
          await gate.promise;
        },
      });
      const hanging = dying.runOnce();
      await threeInFlight.promise;
      // The heads of a's, b's and c's lanes: the three oldest lane heads, e being delivered alone.
      expect(inFlight.map((envelope) => keyOf(envelope.sagaId)).sort()).toEqual(['a', 'b', 'c']);
      const marked = (await rowsOf(db().orm).outbox()).filter((row) => row.deliveryStartedAt !== null);
      expect(marked.map((row) => row.id).sort()).toEqual(inFlight.map((envelope) => envelope.id).sort());

      // The first dispatcher "dies" here (it never finishes); another takes over once lease and timeout ran out.
      const later = new FakeClock(new Date(clock.now().getTime() + DELIVERY_TIMEOUT_MS + LEASE_MS));
      const published: string[] = [];
      const survivor = new SagaDispatcher({
        runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: later }),
        clock: later,
        logger: silentLogger,
        batchSize: 10,
        concurrency: CONCURRENCY,
        leaseMs: LEASE_MS,
        deliveryTimeoutMs: DELIVERY_TIMEOUT_MS,
        publish: async (envelope) => void published.push(envelope.id),
      });
      let passes = 0;
      while ((await survivor.runOnce()).outbox.claimed > 0) passes++;
      expect(passes).toBeGreaterThan(0);
      const rows = await rowsOf(db().orm).outbox();
      expect(published.sort()).toEqual(rows.map((row) => row.id).sort());
      for (const row of rows) {
        const started = inFlight.some((envelope) => envelope.id === row.id);
        expect(row).toMatchObject({ outcome: 'published', attempts: started ? 1 : 0 });
        if (started) expect(row.lastError).toBe(LEASE_EXPIRED_ERROR);
      }
      // e was never started by the dying dispatcher: not charged, its earlier error kept.
      expect(rows.find((row) => row.sagaId === sagaIds.e)).toMatchObject({ attempts: 0, lastError: LEASE_EXPIRED_ERROR });

      // The dying dispatcher's late publishes cannot stamp the rows the survivor took over.
      gate.resolve();
      const late = await hanging;
      expect(late.outbox).toMatchObject({ published: CONCURRENCY, failed: 0 });
      expect((await rowsOf(db().orm).outbox()).filter((row) => row.attempts > 0)).toHaveLength(CONCURRENCY);
    });

    it('a busy pool claims without marking: the row is marked by a start mark of its own when its delivery starts', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      await seeding.handle(scriptedSaga, { type: 'Start', key: 'first', actions: [{ op: 'send', message: { type: 'Hello' } }] });
      const statements: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => statements.push(line) });
      const gate = deferred();
      const first = deferred();
      const seen: string[] = [];
      const dispatcher = new SagaDispatcher({
        runtime: new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock }),
        clock,
        logger: silentLogger,
        concurrency: 2,
        publish: async (envelope) => {
          seen.push(envelope.id);
          if (seen.length === 1) {
            first.resolve();
            await gate.promise;
          }
        },
      });
      const outboxWrites = (what: RegExp) => statements.filter((s) => /update .saga_outbox. set/.test(s) && what.test(s));
      const hanging = dispatcher.runOnce();
      await first.promise;
      // The idle pool's claim marked the first row started: no start mark of its own.
      expect(outboxWrites(/"starting"/)).toHaveLength(1);
      expect(outboxWrites(/set .delivery_started_at. =/)).toHaveLength(0);

      // A second pass while that delivery hangs: the pool is busy, so its claim marks nothing itself.
      await seeding.handle(scriptedSaga, { type: 'Start', key: 'second', actions: [{ op: 'send', message: { type: 'Hello' } }] });
      expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1 });
      expect(outboxWrites(/"starting"/)).toHaveLength(1);
      expect(outboxWrites(/set .token. =/)).toHaveLength(2);
      expect(outboxWrites(/set .delivery_started_at. =/)).toHaveLength(1);
      gate.resolve();
      expect((await hanging).outbox).toMatchObject({ claimed: 1, published: 1 });
      expect(seen).toHaveLength(2);
      const rows = (await rowsOf(db().orm).outbox()).filter((row) => seen.includes(row.id));
      expect(rows).toHaveLength(2);
      expect(rows.every((row) => row.outcome === 'published' && row.attempts === 0)).toBe(true);
    });

    it('a pass claims and publishes the outbox while its timers are being delivered, not after them', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const log: string[] = [];
      const gate = deferred();
      // The step waits until the publisher ran: were the outbox claimed only after the timers' deliveries,
      // this pass would never end.
      const waiting = scriptedSagaWithTick(async () => {
        log.push('step start');
        await gate.promise;
        log.push('step end');
      });
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      await seeding.handle(scriptedSaga, {
        type: 'Start',
        key: 'overlap',
        actions: [
          { op: 'schedule', name: 'x', after: 0, message: { type: 'Tick' } },
          { op: 'send', message: { type: 'Hello' } },
        ],
      });
      clock.advance(1);
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [waiting], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        publish: async () => {
          log.push('publish');
          gate.resolve();
        },
      });
      const pass = await dispatcher.runOnce();
      expect(pass.timers).toMatchObject({ claimed: 1, fired: 1 });
      expect(pass.outbox).toMatchObject({ claimed: 1, published: 1 });
      expect(log.indexOf('publish')).toBeLessThan(log.indexOf('step end'));
    });
  });
}
