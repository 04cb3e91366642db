// An outbox message carries the trace of the step that sent it: the row stores that step span's W3C context; the
// relay publishes it in a saga.publish span that is its child (and links to it), runs the publisher inside that
// span, and hands the consumer `traceparent` (and `tracestate`) in the envelope's headers: W3C written by the
// library when no propagator is registered, the registered propagator's headers when one is. The publish latency
// (published minus written, by the dispatcher's clock) goes to saga.outbox.latency. Real SDK, every database.
import { context, defaultTextMapGetter, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaOutbox, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

/** A publisher that records each envelope and the span active while it runs. */
function recordingPublisher(fail = false) {
  const published: { envelope: OutboxEnvelope; activeSpanId: string | undefined }[] = [];
  const publish = async (envelope: OutboxEnvelope) => {
    published.push({ envelope, activeSpanId: trace.getSpan(context.active())?.spanContext().spanId });
    if (fail) throw new Error('broker down');
  };
  return { published, publish };
}

for (const dialect of DIALECTS) {
  describe(`an outbox message carries its trace to the consumer (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const quiet = () => db().orm.em.fork().nativeDelete(SagaOutbox, {});

    it('saga.publish is a child of the sending step, the publisher runs in it, and the envelope carries its traceparent', async () => {
      await quiet();
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const { published, publish } = recordingPublisher();
      const dispatcher = new SagaDispatcher({ runtime, publish, logger: silentLogger });
      const key = uniqueKey('publish');
      telemetry().resetSpans();
      await telemetry().collect();
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'send', message: { type: 'ReserveStock', key }, headers: { traceparent: 'the step set this' } }],
      });
      const step = telemetry()
        .spans()
        .find((s) => s.name === 'saga.step')!;
      const [row] = await rowsOf(db().orm).outbox(sagaId!);
      expect(JSON.parse(row!.traceContext!)).toEqual({
        traceparent: `00-${step.spanContext().traceId}-${step.spanContext().spanId}-01`,
      });

      clock.advance({ seconds: 3 });
      expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1 });
      const span = telemetry()
        .spans()
        .find((s) => s.name === 'saga.publish')!;
      expect(span.kind).toBe(SpanKind.PRODUCER);
      expect(span.parentSpanContext).toMatchObject({ spanId: step.spanContext().spanId, traceId: step.spanContext().traceId });
      expect(span.links.map((link) => link.context.spanId)).toEqual([step.spanContext().spanId]);
      expect(span.attributes).toMatchObject({
        'saga.type': 'scripted',
        'saga.id': sagaId,
        'saga.message.type': 'ReserveStock',
        'saga.delivery.attempt': 1,
        'saga.delivery.outcome': 'published',
        'saga.outbox.latency': 3,
        'messaging.message.id': row!.id,
        'messaging.operation.type': 'send',
        'messaging.message.conversation_id': row!.correlationId,
      });
      const { envelope, activeSpanId } = published[0]!;
      expect(activeSpanId).toBe(span.spanContext().spanId);
      // The consumer continues from the publish span; the library's header wins over the step's.
      expect(envelope.headers).toEqual({
        'correlation-id': row!.correlationId,
        'saga-type': 'scripted',
        'saga-id': sagaId,
        traceparent: `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`,
      });
      const metrics = await telemetry().collect();
      expect(metrics.histogram('saga.outbox.latency', { 'saga.type': 'scripted' })).toEqual([
        expect.objectContaining({ count: 1, sum: 3 }),
      ]);
      expect(metrics.sum('saga.outbox.published', { 'saga.type': 'scripted' })).toBe(1);
      expect(metrics.sum('saga.outbox.sent', { 'saga.type': 'scripted' })).toBe(1);
    });

    it('a tracestate of the request travels with the row to the envelope', async () => {
      await quiet();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const { published, publish } = recordingPublisher();
      const key = uniqueKey('tracestate');
      // The request arrived with a remote parent carrying vendor state, as an HTTP instrumentation extracts it.
      const parent = new W3CTraceContextPropagator().extract(
        ROOT_CONTEXT,
        { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'congo=t61rcWkgMzE' },
        defaultTextMapGetter,
      );
      await context.with(parent, () =>
        runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'send', message: { type: 'ReserveStock', key } }] }),
      );
      await new SagaDispatcher({ runtime, publish, logger: silentLogger }).runOnce();
      expect(published[0]!.envelope.headers).toMatchObject({
        traceparent: expect.stringMatching(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/),
        tracestate: 'congo=t61rcWkgMzE',
      });
    });

    it('with a propagator registered, the envelope carries what it writes', async () => {
      await quiet();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const { published, publish } = recordingPublisher();
      const key = uniqueKey('propagator');
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'send', message: { type: 'ReserveStock', key } }] });
      telemetry().resetSpans();
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
      try {
        await new SagaDispatcher({ runtime, publish, logger: silentLogger }).runOnce();
      } finally {
        propagation.disable();
      }
      const span = telemetry()
        .spans()
        .find((s) => s.name === 'saga.publish')!;
      const { headers } = published[0]!.envelope;
      expect(headers.traceparent).toBe(`00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
      // What the consumer's instrumentation extracts is the publish span.
      const extracted = new W3CTraceContextPropagator().extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
      expect(trace.getSpanContext(extracted)).toMatchObject({ spanId: span.spanContext().spanId, isRemote: true });
    });

    it('a publisher that throws ends the span in error, the row backs off', async () => {
      await quiet();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const { publish } = recordingPublisher(true);
      const key = uniqueKey('broker-down');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'send', message: { type: 'ReserveStock', key } }],
      });
      telemetry().resetSpans();
      expect((await new SagaDispatcher({ runtime, publish, logger: silentLogger }).runOnce()).outbox).toMatchObject({ failed: 1 });
      const span = telemetry()
        .spans()
        .find((s) => s.name === 'saga.publish')!;
      expect(span.status).toEqual({ code: SpanStatusCode.ERROR, message: 'Error: broker down' });
      expect(span.attributes).toMatchObject({ 'saga.delivery.outcome': 'failed', 'error.type': 'Error' });
      expect(span.events.map((e) => e.name)).toEqual(['exception']);
      expect(await rowsOf(db().orm).outbox(sagaId!)).toMatchObject([{ attempts: 1, dispatchedAt: null }]);
      const dispatch = telemetry()
        .spans()
        .find((s) => s.name === 'saga.dispatch')!;
      expect(dispatch.attributes).toMatchObject({ 'saga.dispatch.outbox.claimed': 1, 'saga.dispatch.outbox.failed': 1 });
    });
  });
}
