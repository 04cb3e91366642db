// The envelope's trace headers are the library's: W3C Trace Context says a header name may come in any case
// ("Traceparent", "TRACEPARENT") and a consumer may read it so. A header a step passed to ctx.send under a trace
// header's name, in whatever case, gives way to the one the dispatcher writes: the envelope never carries two
// traceparents for the consumer to choose from. Headers the dispatcher does not write are left as the step set them.
// Real SDK, every database.
import { context, defaultTextMapGetter, propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaOutbox, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

/** The names of `headers` that are trace headers, in any case. */
const traceHeaderNames = (headers: Record<string, string>) =>
  Object.keys(headers)
    .filter((name) => /^trace(parent|state)$/i.test(name))
    .sort();

/** Headers a step copied from somewhere else: another trace's context, under names in other cases. */
const STEP_HEADERS = {
  Traceparent: '00-11111111111111111111111111111111-2222222222222222-01',
  TRACESTATE: 'other=vendor',
  'x-tenant': 'acme',
};

for (const dialect of DIALECTS) {
  describe(`the dispatcher's trace headers replace a step's, in any case (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    /** Sends one message with {@link STEP_HEADERS} from a request that carries a tracestate; returns what the publisher got. */
    async function publishOne(): Promise<{ envelope: OutboxEnvelope; publishSpanId: string }> {
      await db().orm.em.fork().nativeDelete(SagaOutbox, {});
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const published: OutboxEnvelope[] = [];
      const key = uniqueKey('headers');
      const request = new W3CTraceContextPropagator().extract(
        ROOT_CONTEXT,
        { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'congo=t61rcWkgMzE' },
        defaultTextMapGetter,
      );
      await context.with(request, () =>
        runtime.handle(scriptedSaga, {
          type: 'Start',
          key,
          actions: [{ op: 'send', message: { type: 'ReserveStock', key }, headers: STEP_HEADERS }],
        }),
      );
      telemetry().resetSpans();
      await new SagaDispatcher({ runtime, logger: silentLogger, publish: async (e) => void published.push(e) }).runOnce();
      const span = telemetry()
        .spans()
        .find((s) => s.name === 'saga.publish')!;
      return { envelope: published[0]!, publishSpanId: span.spanContext().spanId };
    }

    it('without a propagator: one traceparent and one tracestate, the publish span’s; other headers kept', async () => {
      const { envelope, publishSpanId } = await publishOne();
      expect(traceHeaderNames(envelope.headers)).toEqual(['traceparent', 'tracestate']);
      expect(envelope.headers.traceparent).toBe(`00-0af7651916cd43dd8448eb211c80319c-${publishSpanId}-01`);
      expect(envelope.headers.tracestate).toBe('congo=t61rcWkgMzE');
      expect(envelope.headers['x-tenant']).toBe('acme');
    });

    it('with a propagator registered: what it writes replaces the step’s headers of those names, in any case', async () => {
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
      let published: Awaited<ReturnType<typeof publishOne>>;
      try {
        published = await publishOne();
      } finally {
        propagation.disable();
      }
      const { envelope, publishSpanId } = published;
      expect(traceHeaderNames(envelope.headers)).toEqual(['traceparent', 'tracestate']);
      // What the consumer's instrumentation extracts is the publish span, not the step's copy.
      const extracted = new W3CTraceContextPropagator().extract(ROOT_CONTEXT, envelope.headers, defaultTextMapGetter);
      expect(trace.getSpanContext(extracted)).toMatchObject({ spanId: publishSpanId });
      expect(envelope.headers.tracestate).toBe('congo=t61rcWkgMzE');
      expect(envelope.headers['x-tenant']).toBe('acme');
    });
  });
}
