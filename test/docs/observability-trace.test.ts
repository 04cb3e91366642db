// docs/observability.md shows the code the tests run: its SDK wiring is test/docs/fixtures/register-telemetry.ts,
// and its example trace is the one this test captures (a request, the step it runs, the timer fired 14 days later,
// the woken step, the published message and its consumer), rendered as an indented tree with ids normalised. The
// doc cannot drift from what the library records. Every database.
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { type AttributeValue, propagation, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan, type TracerProvider } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  runWithCorrelationId,
  SAGA_COUNTERS,
  SAGA_GAUGES,
  SAGA_HISTOGRAMS,
  SagaDispatcher,
  SagaRuntime,
  silentLogger,
} from '../../src/index.js';
import { SPAN_ATTRIBUTES, SPAN_NAMES } from '../../src/telemetry/span-attributes.js';
import { FakeClock } from '../../src/testing/index.js';
import { DIALECTS } from '../support/databases.js';
import { REPO_ROOT } from '../support/repository.js';
import { useDatabase } from '../support/suite.js';
import { OnDemandMetricReader, unregisterAll } from '../support/telemetry.js';
import { InvoiceSagaSchema, invoiceSaga } from './fixtures/invoice-saga.js';
import { registerTelemetry } from './fixtures/register-telemetry.js';

const DOC = 'docs/observability.md';
const read = (path: string) => readFile(resolve(REPO_ROOT, path), 'utf8');

/** The first fenced block of `language` after `heading` in the doc. */
async function blockAfter(heading: string, language: string): Promise<string> {
  const text = await read(DOC);
  const block = text.slice(text.indexOf(heading)).match(new RegExp(`\`\`\`${language}\\n([\\s\\S]*?)\`\`\``));
  if (!text.includes(heading) || !block) throw new Error(`${DOC}: no ${language} block after '${heading}'`);
  return block[1]!;
}

const KINDS: Record<SpanKind, string> = {
  [SpanKind.INTERNAL]: 'internal',
  [SpanKind.SERVER]: 'server',
  [SpanKind.CLIENT]: 'client',
  [SpanKind.PRODUCER]: 'producer',
  [SpanKind.CONSUMER]: 'consumer',
};

/** What a message id is, by the span it is first seen on: the same id is the same placeholder on every span. */
const MESSAGE_IDS: Readonly<Record<string, string>> = {
  [SPAN_NAMES.timeout]: '<timer id>',
  [SPAN_NAMES.publish]: '<outbox row id>',
  [SPAN_NAMES.step]: '<message id>',
};

/**
 * Every trace among `spans` as an indented tree, oldest first: each span numbered, with its kind, the spans it links
 * to, and its attributes sorted by name (ids as placeholders; a pass's counts of zero left out).
 */
function renderTraces(spans: readonly ReadableSpan[]): string {
  const start = (span: ReadableSpan) => span.startTime[0] * 1e9 + span.startTime[1];
  const sorted = [...spans].sort((a, b) => start(a) - start(b));
  const ids = new Set(sorted.map((s) => s.spanContext().spanId));
  const numbers = new Map<string, number>();
  // Ids are new at every run: each is shown as what it is.
  const placeholders = new Map<AttributeValue, string>();
  const shown = (span: ReadableSpan, key: string, value: AttributeValue): string => {
    if (key === SPAN_ATTRIBUTES.sagaId) return '<saga id>';
    if (key !== SPAN_ATTRIBUTES.messageId) return String(value);
    if (!placeholders.has(value)) placeholders.set(value, MESSAGE_IDS[span.name] ?? '<id>');
    return placeholders.get(value)!;
  };
  const lines: string[] = [];
  const render = (span: ReadableSpan, depth: number) => {
    numbers.set(span.spanContext().spanId, numbers.size + 1);
    const links = span.links.map((link) => `#${numbers.get(link.context.spanId) ?? '?'}`);
    const pad = '   '.repeat(depth);
    lines.push(`${pad}#${numbers.size} ${span.name} [${KINDS[span.kind]}]${links.length ? `, links to ${links.join(', ')}` : ''}`);
    for (const key of Object.keys(span.attributes).sort()) {
      const value = span.attributes[key] as AttributeValue;
      if (span.name === SPAN_NAMES.dispatch && value === 0) continue;
      lines.push(`${pad}   ${key}: ${shown(span, key, value)}`);
    }
    for (const child of sorted.filter((s) => s.parentSpanContext?.spanId === span.spanContext().spanId)) render(child, depth + 1);
  };
  for (const root of sorted.filter((s) => !s.parentSpanContext || !ids.has(s.parentSpanContext.spanId))) {
    if (lines.length > 0) lines.push('');
    render(root, 0);
  }
  return `${lines.join('\n')}\n`;
}

describe('docs/observability.md shows the wiring the tests use, and names everything the library records', () => {
  it('names every span, attribute, counter, histogram and gauge', async () => {
    const doc = await read(DOC);
    const names = [
      ...Object.values(SPAN_NAMES),
      ...Object.values(SPAN_ATTRIBUTES),
      ...Object.values(SAGA_COUNTERS),
      ...Object.values(SAGA_HISTOGRAMS),
      ...Object.values(SAGA_GAUGES),
    ];
    expect(names.filter((name) => !doc.includes(`\`${name}\``))).toEqual([]);
  });

  it("'Wiring the SDK' is test/docs/fixtures/register-telemetry.ts", async () => {
    const file = await read('test/docs/fixtures/register-telemetry.ts');
    const example = file.slice(file.indexOf('// observability.md begin\n') + '// observability.md begin\n'.length);
    expect(await blockAfter('## Wiring the SDK', 'ts')).toBe(example);
  });
});

const exporter = new InMemorySpanExporter();
let tracerProvider: TracerProvider;
beforeAll(() => {
  unregisterAll();
  ({ tracerProvider } = registerTelemetry(exporter, new OnDemandMetricReader()));
});
afterAll(async () => {
  await tracerProvider.shutdown();
  unregisterAll();
});

for (const dialect of DIALECTS) {
  describe(`docs/observability.md's trace is the one the library records (${dialect})`, () => {
    const db = useDatabase(dialect, [InvoiceSagaSchema]);

    it("'One trace, from the request to the consumer' is rendered from the spans of a real run", async () => {
      exporter.reset();
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [invoiceSaga], clock });
      const consumer = trace.getTracer('billing-service');
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        // The consumer continues the trace from the envelope's headers, as a broker's instrumentation would.
        publish: async (envelope) => {
          const parent = propagation.extract(ROOT_CONTEXT, envelope.headers);
          consumer.startSpan(`consume ${envelope.type}`, { kind: SpanKind.CONSUMER }, parent).end();
        },
      });
      const api = trace.getTracer('invoice-api');
      await runWithCorrelationId('req-7f3a', () =>
        api.startActiveSpan('POST /invoices', { kind: SpanKind.SERVER }, async (request) => {
          await runtime.handle(invoiceSaga, { type: 'InvoiceIssued', invoiceId: 'inv-1041' });
          request.end();
        }),
      );
      clock.advance({ days: 14, seconds: 30 });
      expect((await dispatcher.runOnce()).timers.fired).toBe(1);
      expect((await dispatcher.runOnce()).outbox.published).toBe(1);
      await tracerProvider.forceFlush();
      expect(renderTraces(exporter.getFinishedSpans())).toBe(await blockAfter('## One trace, from the request to the consumer', 'text'));
    });
  });
}
