// The gauges saga.active (per saga.type), saga.timeout.backlog and saga.outbox.backlog report what the database
// holds (saga.inbox.backlog: test/staging/counted-in-the-inbox-backlog-gauge.test.ts), read only when the SDK collects
// (one statement of counts), at most once per cacheMs of the dispatcher's clock; a failed reading is logged, reports
// nothing and is not thrown into the SDK. A dispatcher registers them at start() and unregisters them at stop(). Real
// SDK, every database.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaOutbox, SagaRuntime, SagaTimer, silentLogger } from '../../src/index.js';
import { SagaGauges } from '../../src/telemetry/saga-gauges.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS, type TestDatabase } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

/** A logger that keeps its warnings. */
function warnings() {
  const lines: { message: string; fields: Record<string, unknown> | undefined }[] = [];
  return {
    lines,
    logger: { ...silentLogger, warn: (message: string, fields?: Record<string, unknown>) => void lines.push({ message, fields }) },
  };
}

/** An empty database but for `active` active sagas, `completed` completed ones, and their timers and outbox rows. */
async function seed(db: TestDatabase, clock: FakeClock, counts: { active: number; completed: number }) {
  const em = db.orm.em.fork();
  await em.nativeDelete(SagaTimer, {});
  await em.nativeDelete(SagaOutbox, {});
  await em.nativeDelete(ScriptedSaga, {});
  const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock });
  for (let i = 0; i < counts.active + counts.completed; i++) {
    const key = uniqueKey('gauge');
    await runtime.handle(scriptedSaga, {
      type: 'Start',
      key,
      // Each active saga: a timer due in 1 minute, one due in 1 hour, and one outbox message (due at once).
      actions: [
        { op: 'schedule', name: 'soon', after: { minutes: 1 } },
        { op: 'schedule', name: 'later', after: { hours: 1 } },
        { op: 'send', message: { type: 'Hello' } },
        ...(i < counts.active ? [] : [{ op: 'complete' } as const]),
      ],
    });
  }
  return runtime;
}

for (const dialect of DIALECTS) {
  describe(`the gauges read the database (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('saga.active counts the active sagas per type; the backlogs count the due, undelivered timers and outbox rows', async () => {
      const clock = new FakeClock();
      const runtime = await seed(db(), clock, { active: 3, completed: 2 });
      const gauges = new SagaGauges({ db: runtime.context, sagas: runtime.gaugedSagas(), clock, logger: silentLogger, cacheMs: 15_000 });
      gauges.start();
      try {
        clock.advance({ minutes: 2 });
        const metrics = await telemetry().collect();
        expect(metrics.gauge('saga.active', { 'saga.type': 'scripted' })).toBe(3);
        // 3 active sagas' "soon" timers are due; the completed sagas' timers were removed; "later" is not due yet.
        expect(metrics.gauge('saga.timeout.backlog')).toBe(3);
        // Every outbox row is due at once, the completed sagas' included.
        expect(metrics.gauge('saga.outbox.backlog')).toBe(5);
        expect(metrics.descriptor('saga.active')).toMatchObject({ unit: '{saga}' });
        expect(metrics.descriptor('saga.timeout.backlog')).toMatchObject({ unit: '{timer}' });
        expect(metrics.descriptor('saga.outbox.backlog')).toMatchObject({ unit: '{message}' });
      } finally {
        gauges.stop();
      }
    });

    it('a reading is reused for cacheMs of the clock: rows written meanwhile show after it', async () => {
      const clock = new FakeClock();
      const runtime = await seed(db(), clock, { active: 1, completed: 0 });
      const gauges = new SagaGauges({ db: runtime.context, sagas: runtime.gaugedSagas(), clock, logger: silentLogger, cacheMs: 10_000 });
      gauges.start();
      try {
        expect((await telemetry().collect()).gauge('saga.active')).toBe(1);
        await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('gauge') });
        clock.advance(9_999);
        expect((await telemetry().collect()).gauge('saga.active')).toBe(1);
        clock.advance(1);
        expect((await telemetry().collect()).gauge('saga.active')).toBe(2);
        // Collections at once share one reading.
        expect(gauges.read()).toBe(gauges.read());
      } finally {
        gauges.stop();
      }
    });

    it('no statement runs until the SDK collects', async () => {
      const logged: string[] = [];
      const orm = await db().openAnother({
        debug: ['query'],
        logger: (line: string) => void logged.push(line.toLowerCase()),
      });
      try {
        const clock = new FakeClock();
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock, verifySchema: false });
        const gauges = new SagaGauges({ db: runtime.context, sagas: runtime.gaugedSagas(), clock, logger: silentLogger, cacheMs: 1 });
        gauges.start();
        try {
          clock.advance({ hours: 1 });
          expect(logged.filter((line) => line.includes('count('))).toEqual([]);
          await telemetry().collect();
          expect(logged.filter((line) => line.includes('count('))).toHaveLength(1);
        } finally {
          gauges.stop();
        }
        clock.advance({ hours: 1 });
        await telemetry().collect();
        expect(logged.filter((line) => line.includes('count('))).toHaveLength(1);
      } finally {
        await orm.close(true);
      }
    });

    it('a failed reading is logged, reports nothing, is not thrown into the SDK, and is not retried within cacheMs', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const { lines, logger } = warnings();
      const missing = { table: '"no_such_saga_table"', column: { completedAt: '"completed_at"' } };
      const gauges = new SagaGauges({ db: runtime.context, sagas: [{ sagaType: 'gone', table: missing }], clock, logger, cacheMs: 5_000 });
      gauges.start();
      try {
        const metrics = await telemetry().collect();
        expect(metrics.errors).toEqual([]);
        expect(metrics.has('saga.active')).toBe(false);
        expect(metrics.has('saga.timeout.backlog')).toBe(false);
        // A fixed message; the cache and the error (a driver error's class and code, never its SQL) are fields.
        expect(lines).toEqual([
          {
            message: 'gauges: reading active sagas and backlogs failed; none reported until the cache ends',
            fields: { cacheMs: 5_000, error: expect.stringMatching(/Exception/) },
          },
        ]);
        expect(JSON.stringify(lines[0])).not.toMatch(/select|no_such_saga_table/i);
        await telemetry().collect();
        expect(lines).toHaveLength(1);
        clock.advance(5_000);
        await telemetry().collect();
        expect(lines).toHaveLength(2);
      } finally {
        gauges.stop();
      }
    });

    it('a dispatcher reports them from start() to stop(), and not at all with gauges: false', async () => {
      const clock = new FakeClock();
      const runtime = await seed(db(), clock, { active: 2, completed: 0 });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, listen: false });
      expect((await telemetry().collect()).has('saga.active')).toBe(false);
      dispatcher.start();
      try {
        expect((await telemetry().collect()).gauge('saga.active', { 'saga.type': 'scripted' })).toBe(2);
      } finally {
        await dispatcher.stop();
      }
      expect((await telemetry().collect()).has('saga.active')).toBe(false);
      const without = new SagaDispatcher({ runtime, logger: silentLogger, listen: false, gauges: false });
      without.start();
      try {
        expect((await telemetry().collect()).has('saga.active')).toBe(false);
      } finally {
        await without.stop();
      }
    });
  });
}
