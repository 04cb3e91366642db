/**
 * Figure "saga step with an OpenTelemetry SDK registered": a message to an existing saga (load it, run the step, one
 * versioned UPDATE and one outbox row in a transaction) through `runtime.handle` from 4 callers on PostgreSQL, with
 * the OpenTelemetry SDK registered as an application registers it for tests (an in-memory span exporter behind a
 * simple span processor, a meter provider with an in-memory metric exporter, the async-hooks context manager),
 * against the same step with no SDK registered. What the SDK costs per step: the `saga.step` span exported on its end,
 * the step duration histogram, the counters, and the trace context stored on the outbox row.
 */
import { context, metrics, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { SagaRuntime } from '../src/index.js';
import { FakeClock } from '../src/testing/index.js';
import { scriptedSaga } from '../test/fixtures/scripted-saga.js';
import { type BenchDatabase, createBenchDatabase } from './bench-database.js';
import { compare, type FigureResult, interleave, secondsOf } from './figure-stats.js';

const CALLERS = 4;
/** Sagas each caller works on, in turn (callers never share a saga: no version conflicts). */
const SAGAS_PER_CALLER = 5;
/** With an SDK recording every step in memory, at least this share of the throughput without one. */
const TARGET = 0.8;

const keyOf = (caller: number, i: number) => `otel-${caller}-${i % SAGAS_PER_CALLER}`;

/** Registers the SDK globally for the length of `work`, then shuts it down and unregisters it. */
async function withSdk<T>(work: () => Promise<T>): Promise<T> {
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  const tracerProvider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter: new InMemorySpanExporter() })] });
  trace.setGlobalTracerProvider(tracerProvider);
  // Exports once, at shutdown: the run measures recording, not exporting.
  const reader = new PeriodicExportingMetricReader({
    exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
    exportIntervalMillis: 3_600_000,
  });
  const meterProvider = new MeterProvider({ readers: [reader] });
  metrics.setGlobalMeterProvider(meterProvider);
  try {
    return await work();
  } finally {
    await tracerProvider.shutdown();
    await meterProvider.shutdown();
    contextManager.disable();
    trace.disable();
    metrics.disable();
    propagation.disable();
    context.disable();
  }
}

/**
 * Sends `messages` messages from the callers through a runtime built for the run (its instruments come from the
 * meter provider registered then); messages per second.
 */
async function drive(db: BenchDatabase, messages: number): Promise<number> {
  const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock: new FakeClock(), verifySchema: false });
  const perCaller = Math.ceil(messages / CALLERS);
  const seconds = await secondsOf(() =>
    Promise.all(
      Array.from({ length: CALLERS }, async (_, caller) => {
        for (let i = 0; i < perCaller; i++) {
          const key = keyOf(caller, i);
          await runtime.handle(scriptedSaga, {
            type: 'Do',
            key,
            actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Counted', key } }],
          });
        }
      }),
    ),
  );
  return (perCaller * CALLERS) / seconds;
}

export async function telemetryOverheadFigures(reps: number, messages: number): Promise<FigureResult[]> {
  const db = await createBenchDatabase('postgresql');
  try {
    const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
    for (let n = 0; n < CALLERS * SAGAS_PER_CALLER; n++) {
      await runtime.handle(scriptedSaga, { type: 'Start', key: keyOf(Math.floor(n / SAGAS_PER_CALLER), n) });
    }
    const samples = await interleave(
      reps,
      { withSdk: () => withSdk(() => drive(db, messages)), without: () => drive(db, messages) },
      { warmUp: true },
    );
    return [
      compare(
        `saga step with an OpenTelemetry SDK registered (in-memory exporters, simple span processor), ${CALLERS} callers (PostgreSQL)`,
        'messages/s',
        samples.withSdk,
        { name: 'the same step, no SDK registered', samples: samples.without },
        TARGET,
      ),
    ];
  } finally {
    await db.dispose();
  }
}
