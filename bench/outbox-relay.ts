/**
 * Figures "outbox relay": N due outbox rows relayed to a no-op publisher by our dispatcher, by a hand-written
 * batch claim, and by graphile-worker, each in 1 or 2 processes of its own on one PostgreSQL database. Every system
 * runs at its own defaults and at its best setting of one sweep that tries the same grid on each
 * (bench/relay-settings.ts).
 */
import { makeWorkerUtils, runMigrations } from 'graphile-worker';
import pg from 'pg';
import { createBenchDatabase } from './bench-database.js';
import type { StepOutput } from './both-majors.js';
import { runTogether } from './child-processes.js';
import { compare, type FigureResult, interleave, type Spread, spreadOf } from './figure-stats.js';
import {
  describeSetting,
  RELAY_SYSTEMS,
  type RelaySetting,
  type RelaySystem,
  relayDefaults,
  settingKey,
  sweepSettings,
} from './relay-settings.js';

/** Inserts `rows` outbox rows due an hour ago, in one statement. */
async function seedOutbox(url: string, rows: number): Promise<void> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    await client.query(
      `insert into saga_outbox (id, saga_type, saga_id, message_type, payload, headers, available_at, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid(), 'Relayed', json_build_object('type', 'Relayed', 'n', i), '{}',
         now() - interval '1 hour', gen_random_uuid(), 0, now() - interval '1 hour'
       from generate_series(1, $1::int) as i`,
      [rows],
    );
  } finally {
    await client.end();
  }
}

/** Adds `rows` graphile-worker jobs. */
async function seedJobs(pgPool: pg.Pool, rows: number): Promise<void> {
  const utils = await makeWorkerUtils({ pgPool });
  try {
    for (let i = 0; i < rows; i += 1_000) {
      const count = Math.min(1_000, rows - i);
      await utils.addJobs(Array.from({ length: count }, (_, j) => ({ identifier: 'relay', payload: { type: 'Relayed', n: i + j } })));
    }
  } finally {
    await utils.release();
  }
}

/** The database every relay of the step runs on: our tables and graphile-worker's. */
interface RelayDatabase {
  readonly url: string;
  readonly jobs: pg.Pool;
}

/** Seeds, relays with `processes` processes of `system` at `setting`, checks every row was published once; rows per second. */
async function relayOnce(db: RelayDatabase, system: RelaySystem, setting: RelaySetting, processes: number, rows: number): Promise<number> {
  await (system === 'graphile-worker' ? seedJobs(db.jobs, rows) : seedOutbox(db.url, rows));
  const args = Array.from({ length: processes }, () => [system, db.url, JSON.stringify({ ...setting, rows })]);
  const { seconds, done } = await runTogether('bench/relay-process.ts', args);
  earlyIdles += done.filter((line) => Number(line.pendingAtIdle) > 0).length;
  const published = done.reduce((sum, line) => sum + Number(line.published), 0);
  if (published !== rows) throw new Error(`${system} with ${processes} process(es) published ${published} of ${rows} rows`);
  return rows / seconds;
}

/** Processes of ours whose first `idle` came while rows were still unpublished (counted for the step's details). */
let earlyIdles = 0;

/** One setting's rate in the sweep. */
interface SweepResult {
  readonly system: RelaySystem;
  readonly setting: RelaySetting;
  readonly rowsPerSecond: number;
}

/** Runs every setting of every system once, in one process each, on `rows` rows. */
async function sweep(db: RelayDatabase, rows: number, short: boolean, log: (line: string) => void): Promise<SweepResult[]> {
  const results: SweepResult[] = [];
  for (const system of RELAY_SYSTEMS) {
    for (const setting of sweepSettings(system, short)) {
      const rowsPerSecond = await relayOnce(db, system, setting, 1, rows);
      log(`  sweep, ${system}, ${describeSetting(system, setting)}: ${Math.round(rowsPerSecond).toLocaleString('en-US')} rows/s`);
      results.push({ system, setting, rowsPerSecond: Math.round(rowsPerSecond) });
    }
  }
  return results;
}

/** A system's two measured settings. */
interface Chosen {
  readonly defaults: RelaySetting;
  readonly best: RelaySetting;
  /** The best setting's rate in the sweep. */
  readonly bestInSweep: number;
}

function choose(results: readonly SweepResult[]): Record<RelaySystem, Chosen> {
  const entries = RELAY_SYSTEMS.map((system) => {
    const own = results.filter((r) => r.system === system);
    const top = own.reduce((a, b) => (b.rowsPerSecond > a.rowsPerSecond ? b : a));
    return [system, { defaults: relayDefaults(system), best: top.setting, bestInSweep: top.rowsPerSecond }] as const;
  });
  return Object.fromEntries(entries) as Record<RelaySystem, Chosen>;
}

/** A measured variant: a system at a setting. */
interface Variant {
  readonly system: RelaySystem;
  readonly setting: RelaySetting;
}

/** Runs the variants `reps` times each, interleaved, in `processes` processes; samples by `settingKey`. */
async function measure(db: RelayDatabase, variants: readonly Variant[], reps: number, processes: number, rows: number) {
  const runs = Object.fromEntries(
    variants.map(({ system, setting }) => [settingKey(system, setting), () => relayOnce(db, system, setting, processes, rows)]),
  );
  return interleave(reps, runs);
}

const NAMES: Record<RelaySystem, string> = {
  ours: 'ours',
  raw: 'raw batch claim + batch stamp',
  'graphile-worker': 'graphile-worker',
};
/** The ratio each baseline's figure targets. */
const TARGETS: Record<Exclude<RelaySystem, 'ours'>, number> = { raw: 0.8, 'graphile-worker': 1 };

const record = (system: RelaySystem, setting: RelaySetting, from: string) => ({
  ...setting,
  from,
  description: describeSetting(system, setting),
});

/** The figures of one process count: ours against each baseline, both at their defaults and both at their best. */
function baselineFigures(rows: number, processes: number, chosen: Record<RelaySystem, Chosen>, samples: Record<string, number[]>) {
  const figures: FigureResult[] = [];
  const of = (system: RelaySystem, setting: RelaySetting) => samples[settingKey(system, setting)]!;
  for (const which of ['defaults', 'best'] as const) {
    const from = which === 'defaults' ? 'defaults' : 'best of the sweep';
    const name = `outbox relay, ${rows} rows, no-op publisher, ${processes} process${processes > 1 ? 'es' : ''}, each at its ${which === 'defaults' ? 'defaults' : 'best setting'} (PostgreSQL)`;
    const ours = chosen.ours[which];
    for (const system of ['raw', 'graphile-worker'] as const) {
      const theirs = chosen[system][which];
      figures.push(
        compare(
          name,
          'rows/s',
          of('ours', ours),
          { name: `${NAMES[system]} at its ${which}`, samples: of(system, theirs) },
          TARGETS[system],
          {
            settings: { ours: record('ours', ours, from), baseline: record(system, theirs, from) },
          },
        ),
      );
    }
  }
  return figures;
}

/** The same setting of ours with the other poll interval: 20 ms if it polls at the default, else the default. */
function otherPoll(setting: RelaySetting): RelaySetting {
  const fallback = relayDefaults('ours').pollMs;
  return { ...setting, pollMs: setting.pollMs === 20 ? fallback : 20 };
}

/**
 * The sweep, then the defaults and the best setting of each system measured `reps` times, interleaved, in 1 and
 * 2 processes; in 1 process also ours at its best with the other poll interval.
 */
export async function outboxRelayFigures(
  reps: number,
  rows: number,
  sweepRows: number,
  short: boolean,
  log: (line: string) => void = () => {},
): Promise<StepOutput> {
  const created = await createBenchDatabase('postgresql');
  // graphile-worker gets a pool of ours, ended before the database is dropped: a pool it made itself could
  // still hold idle connections then, and their termination is an unhandled 'error' that ends this process.
  const jobs = new pg.Pool({ connectionString: created.location, max: 2 });
  jobs.on('error', () => undefined);
  jobs.on('connect', (client) => client.on('error', () => undefined));
  const db: RelayDatabase = { url: created.location, jobs };
  earlyIdles = 0;
  try {
    await runMigrations({ pgPool: jobs });
    const swept = await sweep(db, sweepRows, short, log);
    const chosen = choose(swept);
    const pair = RELAY_SYSTEMS.flatMap((system) => [chosen[system].defaults, chosen[system].best].map((setting) => ({ system, setting })));
    const pollVariant = { system: 'ours' as const, setting: otherPoll(chosen.ours.best) };
    const unique = (variants: Variant[]) => [...new Map(variants.map((v) => [settingKey(v.system, v.setting), v])).values()];
    const figures: FigureResult[] = [];
    const measured: Record<string, Record<string, Spread>> = {};
    const samplesByProcesses: Record<number, Record<string, number[]>> = {};
    for (const processes of [1, 2]) {
      const variants = unique(processes === 1 ? [...pair, pollVariant] : pair);
      const samples = await measure(db, variants, reps, processes, rows);
      samplesByProcesses[processes] = samples;
      measured[processes] = Object.fromEntries(Object.entries(samples).map(([key, values]) => [key, spreadOf(values)]));
      figures.push(...baselineFigures(rows, processes, chosen, samples));
    }
    figures.push(...oursFigures(chosen.ours, pollVariant.setting, samplesByProcesses));
    log(`  ours: ${earlyIdles} process run(s) went idle with rows still unpublished (each waited until every row was)`);
    const details = { sweepRows, rows, reps, sweep: swept, chosen, measured, earlyIdles };
    return { figures, details, report: relayTable(chosen, measured) };
  } finally {
    await jobs.end();
    await created.dispose();
  }
}

/** Ours in 2 processes against 1 (at its defaults and at its best), and polling at 20 ms against the default. */
function oursFigures(chosen: Chosen, other: RelaySetting, samples: Record<number, Record<string, number[]>>): FigureResult[] {
  const of = (processes: number, setting: RelaySetting) => samples[processes]![settingKey('ours', setting)]!;
  const figures = (['defaults', 'best'] as const).map((which) => {
    const setting = chosen[which];
    const from = which === 'defaults' ? 'defaults' : 'best of the sweep';
    return compare(
      `outbox relay: ours, 2 processes vs 1, at its ${which === 'defaults' ? 'defaults' : 'best setting'}`,
      'rows/s',
      of(2, setting),
      { name: 'ours, 1 process', samples: of(1, setting) },
      1,
      { settings: { ours: record('ours', setting, from), baseline: record('ours', setting, from) } },
    );
  });
  const [fast, slow] = chosen.best.pollMs === 20 ? [chosen.best, other] : [other, chosen.best];
  const from = (setting: RelaySetting) => (setting === chosen.best ? 'best of the sweep' : 'best of the sweep, other poll interval');
  figures.push(
    compare(
      `outbox relay: ours, pollIntervalMs 20 vs ${slow.pollMs} (its default), publishConcurrency ${fast.concurrency}, batchSize ${fast.batch}, 1 process`,
      'rows/s',
      of(1, fast),
      { name: `ours, pollIntervalMs ${slow.pollMs}`, samples: of(1, slow) },
      0.95,
      { settings: { ours: record('ours', fast, from(fast)), baseline: record('ours', slow, from(slow)) } },
    ),
  );
  return figures;
}

const fmt = (s: Spread | undefined) =>
  s ? `${s.median.toLocaleString('en-US')} (${s.min.toLocaleString('en-US')}-${s.max.toLocaleString('en-US')})` : '-';

/** Each system's two rows: its defaults and its best setting, where each came from, and its rates in 1 and 2 processes. */
function relayTable(chosen: Record<RelaySystem, Chosen>, measured: Record<string, Record<string, Spread>>): string {
  const header = ['relay', 'row', 'setting', 'in the sweep', '1 process, rows/s', '2 processes, rows/s'];
  const rows = RELAY_SYSTEMS.flatMap((system) =>
    (['defaults', 'best'] as const).map((which) => {
      const setting = chosen[system][which];
      const key = settingKey(system, setting);
      return [
        NAMES[system],
        which === 'defaults' ? 'its defaults' : 'best of the sweep',
        describeSetting(system, setting),
        which === 'best' ? chosen[system].bestInSweep.toLocaleString('en-US') : '',
        fmt(measured[1]?.[key]),
        fmt(measured[2]?.[key]),
      ];
    }),
  );
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [
    'outbox relay, each system at its defaults and at its best setting (medians, min-max):',
    line(header),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...rows.map(line),
  ].join('\n');
}
