// An operator who moves a timer (rescheduleTimers) or puts a dead-lettered one back (requeueTimers) leaves its stored
// trace context as it was: the delivery still continues the trace of the step that scheduled it, not the operator's.
// Real SDK, every database.
import { trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, SagaTimer, silentLogger } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

/** Runs `call` in a span of the operator's own (an admin endpoint's request). */
const asOperator = <T>(call: () => Promise<T>) =>
  trace.getTracer('admin-api').startActiveSpan('POST /admin/timers', async (span) => {
    try {
      return await call();
    } finally {
      span.end();
    }
  });

for (const dialect of DIALECTS) {
  describe(`operator actions keep a timer's trace (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('a rescheduled timer’s saga.timeout is still the child of the step that scheduled it', async () => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      telemetry().resetSpans();
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('rescheduled'),
        actions: [{ op: 'schedule', name: 'reminder', after: { days: 3 } }],
      });
      const scheduling = telemetry()
        .spans()
        .find((s) => s.name === 'saga.step')!;
      const [timer] = await rowsOf(db().orm).timers({ sagaId });
      const ops = new SagaOperations({ runtime });
      const moved = await asOperator(() => ops.rescheduleTimers([timer!.id], new Date(clock.now().getTime() + 60_000)));
      expect(moved.items).toEqual([{ id: timer!.id, status: 'rescheduled' }]);

      telemetry().resetSpans();
      clock.advance({ minutes: 1 });
      expect((await new SagaDispatcher({ runtime, logger: silentLogger }).runOnce()).timers.fired).toBe(1);
      const timeout = telemetry()
        .spans()
        .find((s) => s.name === 'saga.timeout')!;
      expect(timeout.parentSpanContext?.spanId).toBe(scheduling.spanContext().spanId);
      expect(timeout.spanContext().traceId).toBe(scheduling.spanContext().traceId);
    });

    it('a requeued dead-lettered timer’s next saga.timeout is still the child of the step that scheduled it', async () => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      telemetry().resetSpans();
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('requeued'),
        actions: [failingTimer('poison')],
      });
      const scheduling = telemetry()
        .spans()
        .find((s) => s.name === 'saga.step')!;
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, maxAttempts: 2 });
      clock.advance({ seconds: 1 });
      expect((await dispatcher.runOnce()).timers.failed).toBe(1);
      clock.advance({ hours: 1 });
      expect((await dispatcher.runOnce()).timers.deadLettered).toBe(1);
      const [timer] = await rowsOf(db().orm).timers({ sagaId });
      expect((await asOperator(() => new SagaOperations({ runtime }).requeueTimers([timer!.id]))).affected).toBe(1);

      telemetry().resetSpans();
      expect((await dispatcher.runOnce()).timers.claimed).toBe(1);
      const timeout = telemetry()
        .spans()
        .find((s) => s.name === 'saga.timeout')!;
      expect(timeout.parentSpanContext?.spanId).toBe(scheduling.spanContext().spanId);
    });
  });
}
