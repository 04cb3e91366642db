/** Medians, ranges and ratios of repeated measurements. */

/** The spread of one variant's repeated throughputs. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

/** A reference measured in the same run that carries no target: the ratio is only printed. */
export type Limit = { readonly name: string } & Spread & { readonly ratio: number };

/**
 * One figure of `bench/results/latest.json`: ours against its baseline, measured in the same run; `ratio`,
 * `target` and `met` always compare ours with `baseline`. The saga-step figures also carry `limit` (the same
 * statements by hand), the figures of several processes `claimedPerProcess`.
 */
export interface FigureResult {
  readonly name: string;
  /** Unit of every number (higher is better). */
  readonly unit: string;
  readonly ours: Spread;
  readonly baseline: { readonly name: string } & Spread;
  /** ours.median / baseline.median. */
  readonly ratio: number;
  /** The ratio the issue asks for. */
  readonly target: number;
  /** `ratio >= target`, and with `claimedPerProcess` every process claimed something in every run. */
  readonly met: boolean;
  /** Runs of each variant. */
  readonly runs: number;
  /** A second reference with its ratio (ours.median / limit.median), no target: what the database allows. */
  readonly limit?: Limit;
  /** What each process claimed, one array per measured run of ours. */
  readonly claimedPerProcess?: readonly (readonly number[])[];
  /** The settings ours and the baseline ran with, where the figure compares settings (the relay figures). */
  readonly settings?: FigureSettings;
}

/** A figure's settings of ours and of its baseline, each with where it came from (defaults or a sweep). */
export interface FigureSettings {
  readonly ours: Readonly<Record<string, unknown>>;
  readonly baseline: Readonly<Record<string, unknown>>;
}

export function spreadOf(samples: readonly number[]): Spread {
  if (samples.length === 0) throw new Error('no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const median = sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
  return { median: Math.round(median), min: Math.round(sorted[0]!), max: Math.round(sorted.at(-1)!) };
}

/** Extras of a figure: a reference without target, what each process claimed. */
export interface FigureExtras {
  readonly limit?: { readonly name: string; readonly samples: readonly number[] };
  readonly claimedPerProcess?: readonly (readonly number[])[];
  readonly settings?: FigureSettings;
}

const ratioOf = (ours: Spread, other: Spread) => Math.round((ours.median / other.median) * 100) / 100;

/** A figure from the samples of ours and of its baseline (and of its `limit`, if any). */
export function compare(
  name: string,
  unit: string,
  ours: readonly number[],
  baseline: { name: string; samples: readonly number[] },
  target: number,
  { limit, claimedPerProcess, settings }: FigureExtras = {},
): FigureResult {
  const o = spreadOf(ours);
  const b = spreadOf(baseline.samples);
  const ratio = ratioOf(o, b);
  const everyProcessTookPart = claimedPerProcess?.every((run) => run.every((claimed) => claimed > 0)) ?? true;
  const l = limit && spreadOf(limit.samples);
  return {
    name,
    unit,
    ours: o,
    baseline: { name: baseline.name, ...b },
    ratio,
    target,
    met: ratio >= target && everyProcessTookPart,
    runs: ours.length,
    ...(limit && l ? { limit: { name: limit.name, ...l, ratio: ratioOf(o, l) } } : {}),
    ...(claimedPerProcess ? { claimedPerProcess } : {}),
    ...(settings ? { settings } : {}),
  };
}

/**
 * Runs each variant `reps` times, interleaved (a, b, c, a, b, c, ...), so that a noisy neighbour hits every
 * variant alike. Each run returns a throughput. With `warmUp`, each variant first runs once unmeasured, so the
 * samples measure code the JIT has compiled, as in a process that has been serving for a while (for figures
 * measured inside this process; a figure that starts processes of its own measures them cold, every variant alike).
 */
export async function interleave<K extends string>(
  reps: number,
  variants: Record<K, () => Promise<number>>,
  { warmUp = false }: { readonly warmUp?: boolean } = {},
): Promise<Record<K, number[]>> {
  const keys = Object.keys(variants) as K[];
  if (warmUp) for (const key of keys) await variants[key]();
  const samples = Object.fromEntries(keys.map((k) => [k, [] as number[]])) as Record<K, number[]>;
  for (let rep = 0; rep < reps; rep++) {
    for (const key of keys) samples[key].push(await variants[key]());
  }
  return samples;
}

/** Seconds `work` takes. */
export async function secondsOf(work: () => Promise<unknown>): Promise<number> {
  const started = process.hrtime.bigint();
  await work();
  return Number(process.hrtime.bigint() - started) / 1e9;
}

const fmt = (n: number) => n.toLocaleString('en-US');

/**
 * The table `npm run bench` prints: a row per figure, under it a row for its `limit` (ratio printed, no target),
 * and below the table what each process claimed in the figures of several processes.
 */
export function formatTable(figures: readonly FigureResult[]): string {
  const header = ['figure', 'unit', 'ours median (min-max)', 'baseline', 'baseline median (min-max)', 'ratio', 'target', 'met'];
  const spread = (s: Spread) => `${fmt(s.median)} (${fmt(s.min)}-${fmt(s.max)})`;
  const rows = figures.flatMap((f) => [
    [f.name, f.unit, spread(f.ours), f.baseline.name, spread(f.baseline), f.ratio.toFixed(2), f.target.toFixed(2), f.met ? 'yes' : 'NO'],
    ...(f.limit
      ? [['  ours against the limit (no target)', '', '', f.limit.name, spread(f.limit), f.limit.ratio.toFixed(2), '-', '-']]
      : []),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  const table = [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
  const claims = figures
    .filter((f) => f.claimedPerProcess)
    .map((f) => `${f.name}: claimed per process, each run: ${f.claimedPerProcess!.map((run) => run.join(' + ')).join('; ')}`);
  return claims.length > 0 ? `${table}\n\n${claims.join('\n')}` : table;
}
