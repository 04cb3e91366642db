/** Medians, ranges and ratios of repeated measurements. */

/** The spread of one variant's repeated throughputs. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

/** One figure of `bench/results/latest.json`: ours against one baseline, measured in the same run. */
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
  readonly met: boolean;
  /** Runs of each variant. */
  readonly runs: number;
}

export function spreadOf(samples: readonly number[]): Spread {
  if (samples.length === 0) throw new Error('no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const median = sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
  return { median: Math.round(median), min: Math.round(sorted[0]!), max: Math.round(sorted.at(-1)!) };
}

/** A figure from the samples of ours and of one baseline. */
export function compare(
  name: string,
  unit: string,
  ours: readonly number[],
  baseline: { name: string; samples: readonly number[] },
  target: number,
): FigureResult {
  const o = spreadOf(ours);
  const b = spreadOf(baseline.samples);
  const ratio = Math.round((o.median / b.median) * 100) / 100;
  return { name, unit, ours: o, baseline: { name: baseline.name, ...b }, ratio, target, met: ratio >= target, runs: ours.length };
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

/** The table `npm run bench` prints. */
export function formatTable(figures: readonly FigureResult[]): string {
  const header = ['figure', 'unit', 'ours median (min-max)', 'baseline', 'baseline median (min-max)', 'ratio', 'target', 'met'];
  const rows = figures.map((f) => [
    f.name,
    f.unit,
    `${fmt(f.ours.median)} (${fmt(f.ours.min)}-${fmt(f.ours.max)})`,
    f.baseline.name,
    `${fmt(f.baseline.median)} (${fmt(f.baseline.min)}-${fmt(f.baseline.max)})`,
    f.ratio.toFixed(2),
    f.target.toFixed(2),
    f.met ? 'yes' : 'NO',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}
