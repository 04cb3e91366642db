// The OpenTelemetry SDK as an application registers it, with in-memory exporters: spans land in an
// InMemorySpanExporter through a SimpleSpanProcessor, metrics are collected on demand by a reader with delta
// temporality (each collection holds what happened since the last one). Registered globally for one test file and
// unregistered after it: test files share a worker's globals (vitest.config.ts, `isolate: false`).
import { context, type MetricAttributes, metrics, propagation, type TextMapPropagator, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { AggregationTemporality, DataPointType, MeterProvider, type MetricData, MetricReader } from '@opentelemetry/sdk-metrics';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll } from 'vitest';
import { TELEMETRY_SCOPE } from '../../src/telemetry/saga-metrics.js';

/** A metric reader that collects when the test asks, each collection the deltas since the last. */
export class OnDemandMetricReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.DELTA });
  }
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** The library's metrics of one collection, by instrument name. */
export class Collected {
  constructor(
    readonly byName: ReadonlyMap<string, MetricData>,
    readonly errors: readonly unknown[],
  ) {}

  /** Whether `name` reported anything in this collection. */
  has(name: string): boolean {
    return (this.byName.get(name)?.dataPoints.length ?? 0) > 0;
  }

  /** The sum of a counter's points whose attributes include `attributes`. */
  sum(name: string, attributes: MetricAttributes = {}): number {
    const metric = this.byName.get(name);
    if (!metric || metric.dataPointType !== DataPointType.SUM) return 0;
    return metric.dataPoints.filter((p) => matches(p.attributes, attributes)).reduce((total, p) => total + p.value, 0);
  }

  /** A gauge's value for the point whose attributes include `attributes`; undefined when none. */
  gauge(name: string, attributes: MetricAttributes = {}): number | undefined {
    const metric = this.byName.get(name);
    if (!metric || metric.dataPointType !== DataPointType.GAUGE) return undefined;
    return metric.dataPoints.find((p) => matches(p.attributes, attributes))?.value;
  }

  /** A histogram's points whose attributes include `attributes`: count, sum, min, max of each. */
  histogram(name: string, attributes: MetricAttributes = {}) {
    const metric = this.byName.get(name);
    if (!metric || metric.dataPointType !== DataPointType.HISTOGRAM) return [];
    return metric.dataPoints
      .filter((p) => matches(p.attributes, attributes))
      .map((p) => ({ attributes: p.attributes, count: p.value.count, sum: p.value.sum, min: p.value.min, max: p.value.max }));
  }

  /** The descriptor (unit, description) of `name`. */
  descriptor(name: string) {
    return this.byName.get(name)?.descriptor;
  }
}

function matches(actual: MetricAttributes, wanted: MetricAttributes): boolean {
  return Object.entries(wanted).every(([key, value]) => actual[key] === value);
}

/** The registered SDK of one test file. */
export interface Telemetry {
  /** Spans ended since the last `resetSpans()`, in the order they ended. */
  spans(): ReadableSpan[];
  resetSpans(): void;
  /** Collects the library's metrics: what was recorded since the last collection. */
  collect(): Promise<Collected>;
}

/**
 * Registers the OpenTelemetry SDK globally before the file's tests (context manager, tracer provider, meter provider,
 * and `propagator` when given) and unregisters all of it after them. Returns a getter.
 */
export function useTelemetry(options: { readonly propagator?: TextMapPropagator } = {}): () => Telemetry {
  let registered: (Telemetry & { shutdown(): Promise<void> }) | undefined;
  beforeAll(() => {
    unregisterAll();
    const contextManager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(contextManager);
    const exporter = new InMemorySpanExporter();
    const tracerProvider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    trace.setGlobalTracerProvider(tracerProvider);
    const reader = new OnDemandMetricReader();
    const meterProvider = new MeterProvider({ readers: [reader] });
    metrics.setGlobalMeterProvider(meterProvider);
    if (options.propagator) propagation.setGlobalPropagator(options.propagator);
    registered = {
      spans: () => exporter.getFinishedSpans(),
      resetSpans: () => exporter.reset(),
      collect: async () => {
        const { resourceMetrics, errors } = await reader.collect();
        const byName = new Map<string, MetricData>();
        for (const scope of resourceMetrics.scopeMetrics) {
          if (scope.scope.name !== TELEMETRY_SCOPE) continue;
          for (const metric of scope.metrics) byName.set(metric.descriptor.name, metric);
        }
        return new Collected(byName, errors);
      },
      shutdown: async () => {
        await tracerProvider.shutdown();
        await meterProvider.shutdown();
        contextManager.disable();
      },
    };
  });
  afterAll(async () => {
    await registered?.shutdown();
    unregisterAll();
  });
  return () => {
    if (!registered) throw new Error('the telemetry SDK is not registered yet');
    return registered;
  };
}

/** Unregisters every global OpenTelemetry provider: the API answers with its no-ops again. */
export function unregisterAll(): void {
  trace.disable();
  metrics.disable();
  propagation.disable();
  context.disable();
}
