// Without an OpenTelemetry SDK registered, the library's telemetry is a no-op: no trace context is stored on timers
// and outbox rows, no trace header is added to envelopes, no span is active in a step or a publisher, and the
// gauges never read the database. The in-memory stats still count. Every database.
import { context, trace } from '@opentelemetry/api';
import { beforeAll, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { unregisterAll } from '../support/telemetry.js';

beforeAll(() => {
  // Another file of this worker may have left nothing behind; make sure.
  unregisterAll();
});

for (const dialect of DIALECTS) {
  describe(`no SDK registered: nothing is recorded (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('timers and outbox rows store no trace context, envelopes carry no trace header, no span is active', async () => {
      const clock = new FakeClock();
      const activeInStep: unknown[] = [];
      const saga = scriptedSagaWithTick((_saga, _m, ctx) => {
        activeInStep.push(trace.getSpan(context.active()));
        ctx.send({ type: 'Woken' });
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const woken = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock });
      const published: { envelope: OutboxEnvelope; active: unknown }[] = [];
      const dispatcher = new SagaDispatcher({
        runtime: woken,
        logger: silentLogger,
        publish: async (envelope) => void published.push({ envelope, active: trace.getSpan(context.active()) }),
      });
      const key = uniqueKey('no-sdk');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [
          { op: 'schedule', name: 'reminder', after: { hours: 1 } },
          { op: 'send', message: { type: 'Hello' } },
        ],
      });
      clock.advance({ hours: 1 });
      await dispatcher.runOnce();
      await dispatcher.runOnce();

      expect((await rowsOf(db().orm).timers({ sagaId })).map((t) => t.traceContext)).toEqual([null]);
      expect((await rowsOf(db().orm).outbox(sagaId!)).map((o) => o.traceContext)).toEqual([null, null]);
      expect(published).toHaveLength(2);
      for (const { envelope, active } of published) {
        expect(Object.keys(envelope.headers).sort()).toEqual(['correlation-id', 'saga-id', 'saga-type']);
        expect(active).toBeUndefined();
      }
      expect(activeInStep).toEqual([undefined]);
      expect(woken.stats()).toMatchObject({ handled: 1, messagesSent: 1 });
      expect(dispatcher.stats()).toMatchObject({ timersFired: 1, messagesPublished: 2 });
    });

    it("a running dispatcher's gauges never read the database", async () => {
      const logged: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => void logged.push(line.toLowerCase()) });
      try {
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
        const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, listen: false });
        dispatcher.start();
        await new Promise<void>((resolve) => dispatcher.on('idle', resolve));
        await dispatcher.stop();
        expect(logged.some((line) => line.includes('saga_timer'))).toBe(true);
        expect(logged.filter((line) => line.includes('count('))).toEqual([]);
      } finally {
        await orm.close(true);
      }
    });
  });
}
