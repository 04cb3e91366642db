// A timer carries the trace of the step that scheduled it: the row stores that step span's W3C context, and the
// delivery days later (a fake clock advanced, one dispatcher pass) opens a saga.timeout span that is its child and
// links to it, with the woken step's saga.step span under it. One trace shows the request, the scheduling step and
// the woken step. A garbled stored context never blocks the delivery. Real OpenTelemetry SDK, every database.
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, SagaTimer, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();
const tracer = () => trace.getTracer('the-app');

/** Schedules the timer `reminder` two days ahead, whose Tick notes it was woken. */
const scheduleReminder: Action = {
  op: 'schedule',
  name: 'reminder',
  after: { days: 2 },
  message: { type: 'Tick', label: 'reminder', actions: [{ op: 'note', text: 'woken' }] },
};

for (const dialect of DIALECTS) {
  describe(`a timer continues the trace that scheduled it (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('request -> saga.step -> (two days) -> saga.timeout (child of the step, linked to it) -> the woken saga.step', async () => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      const key = uniqueKey('trace');
      telemetry().resetSpans();
      await telemetry().collect();

      const started = await tracer().startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (request) => {
        try {
          return await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [scheduleReminder] });
        } finally {
          request.end();
        }
      });
      const [request, step] = ['POST /orders', 'saga.step'].map(
        (name) =>
          telemetry()
            .spans()
            .find((s) => s.name === name)!,
      );
      expect(step!.parentSpanContext?.spanId).toBe(request!.spanContext().spanId);
      expect(step!.spanContext().traceId).toBe(request!.spanContext().traceId);
      expect(step!.attributes).toMatchObject({
        'saga.type': 'scripted',
        'saga.message.type': 'Start',
        'saga.step.outcome': 'started',
        'saga.id': started.sagaId,
        'saga.version': 0,
        'saga.step.conflicts': 0,
        'messaging.message.conversation_id': expect.any(String),
      });
      // The timer row stores the scheduling step's context, as W3C traceparent text.
      const [timer] = await rowsOf(db().orm).timers({ sagaId: started.sagaId });
      const { spanId, traceId } = step!.spanContext();
      expect(JSON.parse(timer!.traceContext!)).toEqual({ traceparent: `00-${traceId}-${spanId}-01` });

      telemetry().resetSpans();
      clock.advance({ days: 2, seconds: 90 });
      const pass = await dispatcher.runOnce();
      expect(pass.timers).toMatchObject({ claimed: 1, fired: 1 });
      const spans = telemetry().spans();
      const timeout = spans.find((s) => s.name === 'saga.timeout')!;
      const woken = spans.find((s) => s.name === 'saga.step')!;
      expect(timeout.kind).toBe(SpanKind.CONSUMER);
      expect(timeout.spanContext().traceId).toBe(traceId);
      expect(timeout.parentSpanContext).toMatchObject({ traceId, spanId, isRemote: true });
      expect(timeout.links.map((link) => link.context)).toEqual([expect.objectContaining({ traceId, spanId })]);
      expect(timeout.attributes).toMatchObject({
        'saga.type': 'scripted',
        'saga.id': started.sagaId,
        'saga.timeout.name': 'reminder',
        'saga.timeout.lateness': 90,
        'saga.delivery.attempt': 1,
        'saga.delivery.outcome': 'fired',
        'messaging.message.id': timer!.id,
        'messaging.operation.type': 'process',
      });
      expect(woken.parentSpanContext?.spanId).toBe(timeout.spanContext().spanId);
      expect(woken.spanContext().traceId).toBe(traceId);
      expect(woken.attributes).toMatchObject({ 'saga.message.type': 'Tick', 'saga.step.outcome': 'handled', 'saga.version': 1 });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ log: 'started;tick:reminder;woken;' });

      // The pass is a trace of its own, with its counts.
      const dispatch = spans.find((s) => s.name === 'saga.dispatch')!;
      expect(dispatch.parentSpanContext).toBeUndefined();
      expect(dispatch.spanContext().traceId).not.toBe(traceId);
      expect(dispatch.attributes).toMatchObject({ 'saga.dispatch.timer.claimed': 1, 'saga.dispatch.timer.fired': 1 });

      const metrics = await telemetry().collect();
      expect(metrics.histogram('saga.timeout.lateness', { 'saga.type': 'scripted' })).toEqual([
        expect.objectContaining({ count: 1, sum: 90, min: 90, max: 90 }),
      ]);
      expect(metrics.descriptor('saga.timeout.lateness')).toMatchObject({ unit: 's' });
      expect(metrics.histogram('saga.step.duration', { 'saga.type': 'scripted', 'saga.step.outcome': 'started' })).toEqual([
        expect.objectContaining({ count: 1 }),
      ]);
      expect(metrics.histogram('saga.step.duration', { 'saga.type': 'scripted', 'saga.step.outcome': 'handled' })).toEqual([
        expect.objectContaining({ count: 1 }),
      ]);
      expect(metrics.sum('saga.timeout.fired', { 'saga.type': 'scripted' })).toBe(1);
    });

    it('a timer whose stored context is garbled or hostile is delivered all the same, in a trace of its own', async () => {
      const em = db().orm.em.fork();
      await em.nativeDelete(SagaTimer, {});
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const keys: string[] = [];
      const stored = [
        'not json',
        '[]',
        '{"traceparent":"00-00000000000000000000000000000000-0000000000000000-01"}',
        '{"traceparent":"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
        '{"traceparent":"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"}',
        `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","pad":"${'x'.repeat(5_000)}"}`,
        '{"__proto__":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}',
      ];
      for (const text of stored) {
        const key = uniqueKey('garbled');
        keys.push(key);
        const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [scheduleReminder] });
        await em.nativeUpdate(SagaTimer, { sagaId }, { traceContext: text });
      }
      telemetry().resetSpans();
      clock.advance({ days: 2 });
      const pass = await new SagaDispatcher({ runtime, logger: silentLogger }).runOnce();
      expect(pass.timers).toMatchObject({ claimed: stored.length, fired: stored.length, failed: 0, deadLettered: 0 });
      for (const key of keys) expect(await rowsOf(db().orm).saga(key)).toMatchObject({ log: 'started;tick:reminder;woken;' });
      const timeouts = telemetry()
        .spans()
        .filter((s) => s.name === 'saga.timeout');
      expect(timeouts).toHaveLength(stored.length);
      for (const span of timeouts) {
        expect(span.parentSpanContext).toBeUndefined();
        expect(span.links).toEqual([]);
        expect(span.status.code).not.toBe(SpanStatusCode.ERROR);
      }
    });

    it('a replaced timer stores the context of the step that replaced it', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const key = uniqueKey('replaced');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [scheduleReminder] });
      telemetry().resetSpans();
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [scheduleReminder] });
      const replacing = telemetry()
        .spans()
        .find((s) => s.name === 'saga.step')!;
      const pending = await rowsOf(db().orm).pendingTimers(sagaId!);
      expect(pending).toHaveLength(1);
      expect(JSON.parse(pending[0]!.traceContext!).traceparent).toContain(replacing.spanContext().spanId);
    });
  });
}
