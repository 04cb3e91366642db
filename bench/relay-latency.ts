/**
 * "relay latency": a producer process commits rows at a steady rate for a fixed time, a relay process at its
 * defaults publishes them as they come; the relay records publish time minus commit time of every row. Ours
 * relays outbox rows, graphile-worker runs jobs (bench/relay-producer.ts, bench/relay-process.ts).
 */
import { runMigrations } from 'graphile-worker';
import pg from 'pg';
import { createBenchDatabase } from './bench-database.js';
import type { StepOutput } from './both-majors.js';
import { runChildrenTogether } from './child-processes.js';
import { describeSetting, type RelaySystem, relayDefaults } from './relay-settings.js';

/** One relay's latencies, ms. */
interface Latency {
  readonly system: RelaySystem;
  readonly setting: string;
  readonly medianMs: number;
  readonly p99Ms: number;
  /** How far the producer's statements fell behind its schedule, at most (ms). */
  readonly producerBehindMs: number;
  /** Wall time from the start to the last row published. */
  readonly seconds: number;
}

async function latencyOf(url: string, system: 'ours' | 'graphile-worker', rate: number, rows: number): Promise<Latency> {
  const setting = relayDefaults(system);
  const { seconds, done } = await runChildrenTogether([
    ['bench/relay-process.ts', [system, url, JSON.stringify({ ...setting, rows, latency: true })]],
    ['bench/relay-producer.ts', [system === 'ours' ? 'outbox' : 'jobs', url, String(rate), String(rows)]],
  ]);
  const relay = done.find((line) => 'published' in line);
  const producer = done.find((line) => 'inserted' in line);
  if (Number(relay?.published) !== rows || Number(producer?.inserted) !== rows) {
    throw new Error(`${system}: the producer committed ${producer?.inserted} rows and the relay published ${relay?.published} of ${rows}`);
  }
  const { median, p99 } = relay!.latenciesMs as { median: number; p99: number };
  return {
    system,
    setting: describeSetting(system, setting),
    medianMs: median,
    p99Ms: p99,
    producerBehindMs: Number(producer!.behindMs),
    seconds: Math.round(seconds * 10) / 10,
  };
}

/** baseline / ours, two decimals, or two significant digits below 0.1. */
const ratio = (theirs: number, ours: number) => {
  if (!(ours > 0)) return '-';
  const value = theirs / ours;
  return value < 0.1 ? value.toPrecision(2) : value.toFixed(2);
};

function latencyTable(rate: number, seconds: number, ours: Latency, theirs: Latency): string {
  const header = ['relay latency, ms', 'ours', 'graphile-worker', 'graphile-worker / ours'];
  const rows = [
    ['median', String(ours.medianMs), String(theirs.medianMs), ratio(theirs.medianMs, ours.medianMs)],
    ['p99', String(ours.p99Ms), String(theirs.p99Ms), ratio(theirs.p99Ms, ours.p99Ms)],
  ];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [
    `relay latency: rows committed at ${rate.toLocaleString('en-US')} rows/s for ${seconds} s, publish time minus commit time, each relay at its defaults`,
    `(ours: ${ours.setting}; graphile-worker: ${theirs.setting}). Lower ms is better; the ratio is graphile-worker / ours, so higher is better for ours.`,
    line(header),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...rows.map(line),
    `producer at most ${ours.producerBehindMs} ms (ours) and ${theirs.producerBehindMs} ms (graphile-worker) behind its schedule; last row published after ${ours.seconds} s and ${theirs.seconds} s`,
  ].join('\n');
}

/** Ours and graphile-worker at their defaults, one run each, at `rate` rows per second for `seconds`. */
export async function relayLatencyFigures(rate: number, seconds: number, log: (line: string) => void = () => {}): Promise<StepOutput> {
  const created = await createBenchDatabase('postgresql');
  const jobs = new pg.Pool({ connectionString: created.location, max: 1 });
  jobs.on('error', () => undefined);
  jobs.on('connect', (client) => client.on('error', () => undefined));
  try {
    await runMigrations({ pgPool: jobs });
    const rows = Math.round(rate * seconds);
    const ours = await latencyOf(created.location, 'ours', rate, rows);
    log(`  latency, ours: median ${ours.medianMs} ms, p99 ${ours.p99Ms} ms`);
    const theirs = await latencyOf(created.location, 'graphile-worker', rate, rows);
    log(`  latency, graphile-worker: median ${theirs.medianMs} ms, p99 ${theirs.p99Ms} ms`);
    return {
      figures: [],
      details: { rate, seconds, rows, ours, graphileWorker: theirs },
      report: latencyTable(rate, seconds, ours, theirs),
    };
  } finally {
    await jobs.end();
    await created.dispose();
  }
}
