// A staged delivery and a staged message carry the trace of the request that staged them: the saga_inbox (or
// saga_outbox) row stores the W3C context current at the staging call, and the dispatcher's saga.deliver span (or
// saga.publish span) is its child and links to it; the woken step's saga.step span is the saga.deliver span's child.
// Real OpenTelemetry SDK, every database.
import { SpanKind, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();
const tracer = () => trace.getTracer('the-app');

for (const dialect of DIALECTS) {
  describe(`staged rows continue the trace that staged them (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('request -> (commit) -> saga.deliver (child of the request, linked to it) -> the saga.step it wakes', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const published: Record<string, string>[] = [];
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        publish: async (envelope) => {
          if (envelope.type === 'ArticleCreated') published.push(envelope.headers);
        },
      });
      const key = uniqueKey('staged-trace');
      telemetry().resetSpans();

      await tracer().startActiveSpan('POST /articles', { kind: SpanKind.SERVER }, async (request) => {
        try {
          await db()
            .orm.em.fork()
            .transactional(async (em) => {
              runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key, actions: [{ op: 'note', text: 'staged' }] });
              runtime.stageMessage(em, { type: 'ArticleCreated', key });
            });
        } finally {
          request.end();
        }
      });
      const request = telemetry()
        .spans()
        .find((s) => s.name === 'POST /articles')!;
      const { traceId, spanId } = request.spanContext();

      telemetry().resetSpans();
      const pass = await dispatcher.runOnce();
      expect(pass.inbox).toMatchObject({ claimed: 1, delivered: 1 });
      expect(pass.outbox).toMatchObject({ claimed: 1, published: 1 });
      const spans = telemetry().spans();
      const deliver = spans.find((s) => s.name === 'saga.deliver')!;
      const step = spans.find((s) => s.name === 'saga.step')!;
      const publish = spans.find((s) => s.name === 'saga.publish')!;
      expect(deliver.kind).toBe(SpanKind.CONSUMER);
      expect(deliver.spanContext().traceId).toBe(traceId);
      expect(deliver.parentSpanContext).toMatchObject({ traceId, spanId, isRemote: true });
      expect(deliver.links.map((link) => link.context)).toEqual([expect.objectContaining({ traceId, spanId })]);
      expect(deliver.attributes).toMatchObject({
        'saga.type': 'scripted',
        'saga.key': key,
        'saga.message.type': 'Start',
        'messaging.operation.type': 'process',
        'saga.delivery.attempt': 1,
        'saga.delivery.outcome': 'delivered',
      });
      expect(step.parentSpanContext?.spanId).toBe(deliver.spanContext().spanId);
      expect(step.attributes).toMatchObject({ 'saga.step.outcome': 'started' });
      // The app's own message: published in the request's trace, its envelope carrying that trace on.
      expect(publish.parentSpanContext).toMatchObject({ traceId, spanId });
      expect(published).toHaveLength(1);
      expect(published[0]!.traceparent).toBe(`00-${traceId}-${publish.spanContext().spanId}-01`);
    });

    it('staged without a trace: the delivery starts a trace of its own and still delivers', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      const key = uniqueKey('untraced');
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key });
        });
      telemetry().resetSpans();
      expect((await dispatcher.runOnce()).inbox).toMatchObject({ claimed: 1, delivered: 1 });
      const deliver = telemetry()
        .spans()
        .find((s) => s.name === 'saga.deliver')!;
      expect(deliver.parentSpanContext).toBeUndefined();
      expect(deliver.links).toEqual([]);
    });
  });
}
