/**
 * The reliability summary table and its verdict, as pure functions of what the tests reported, so a unit test
 * can feed it made-up reports (test/unit/reliability-summary.test.ts).
 */
import {
  RELIABILITY_DATABASES,
  RELIABILITY_FILES,
  RELIABILITY_SCENARIOS,
  type ReliabilityFigures,
  type ReliabilityScenario,
} from './reliability-figures.js';

/** The tag that marks a test as one of the reliability scenarios (defined in vitest.config.ts). */
export const RELIABILITY_TAG = 'reliability';

/** One tagged test as the reporter saw it. */
export interface ReliabilityTestReport {
  readonly name: string;
  /** vitest's state of the test: 'passed', 'failed', 'skipped' or 'pending'. */
  readonly state: string;
  readonly figures: ReliabilityFigures | undefined;
}

/** The printed table, and every reason the run fails (none: it passes). */
export interface ReliabilitySummary {
  readonly table: string;
  readonly problems: readonly string[];
}

const COUNT_COLUMNS = ['processes', 'load', 'kills', 'restarts', 'dbFaults', 'hostile', 'lost', 'twice'] as const;
const HEADERS: Record<(typeof COUNT_COLUMNS)[number], string> = {
  processes: 'processes',
  load: 'load',
  kills: 'kills',
  restarts: 'restarts',
  dbFaults: 'db faults',
  hostile: 'hostile',
  lost: 'lost',
  twice: 'twice',
};

/**
 * Whether a run must show every scenario on every database: it ran every file of RELIABILITY_FILES (`moduleIds`:
 * the absolute paths of the files it ran) and was not `narrowed` to some tests (by name, tag, line or id).
 */
export function isWholeRun(moduleIds: readonly string[], narrowed: boolean): boolean {
  return !narrowed && RELIABILITY_FILES.every((file) => moduleIds.some((id) => id.endsWith(`/${file}`)));
}

/**
 * Builds the table (one row per report, then totals) and the problems: a tagged test that did not pass, one
 * that passed without reporting figures, a lost or twice-applied unit of work, an unknown scenario name.
 * With `complete` (a whole run, or `npm run test:reliability`) also a skipped tagged test and a scenario and
 * database that nothing reported; without it only the tagged tests that ran are judged.
 */
export function summarizeReliability(reports: readonly ReliabilityTestReport[], { complete } = { complete: true }): ReliabilitySummary {
  const problems: string[] = [];
  const figures: ReliabilityFigures[] = [];
  for (const report of complete ? reports : reports.filter(ran)) {
    if (report.state !== 'passed')
      problems.push(`"${report.name}" ${report.state === 'skipped' ? 'was skipped' : `did not pass (${report.state})`}`);
    if (report.figures) figures.push(report.figures);
    else if (report.state === 'passed') problems.push(`"${report.name}" passed but reported no figures`);
  }
  for (const row of figures) {
    if (!(row.scenario in RELIABILITY_SCENARIOS)) problems.push(`unknown scenario "${row.scenario}"`);
    if (row.lost !== 0) problems.push(`${row.scenario} on ${row.database}: ${row.lost} unit(s) of work lost`);
    if (row.twice !== 0) problems.push(`${row.scenario} on ${row.database}: ${row.twice} unit(s) of work applied twice`);
  }
  if (complete) problems.push(...unreported(figures));
  return { table: renderTable(figures), problems };
}

/** A problem for each scenario and database that no row covers. */
function unreported(figures: readonly ReliabilityFigures[]): string[] {
  return (Object.keys(RELIABILITY_SCENARIOS) as ReliabilityScenario[]).flatMap((scenario) =>
    RELIABILITY_DATABASES.filter((database) => !figures.some((row) => row.scenario === scenario && row.database === database)).map(
      (database) => `${scenario} on ${database}: no test reported figures`,
    ),
  );
}

/** Whether a tagged test ran: not skipped (a test still pending when the run ended counts as ran, and failed). */
export function ran(report: ReliabilityTestReport): boolean {
  return report.state !== 'skipped';
}

/** The rows sorted by scenario (in the order of RELIABILITY_SCENARIOS) and database, then a totals row. */
function renderTable(figures: readonly ReliabilityFigures[]): string {
  const order = Object.keys(RELIABILITY_SCENARIOS);
  const sorted = [...figures].sort((a, b) => order.indexOf(a.scenario) - order.indexOf(b.scenario) || a.database.localeCompare(b.database));
  const total = Object.fromEntries(COUNT_COLUMNS.map((column) => [column, sorted.reduce((sum, row) => sum + row[column], 0)]));
  const lines: string[][] = [
    ['scenario', 'database', ...COUNT_COLUMNS.map((column) => HEADERS[column])],
    ...sorted.map((row) => [row.scenario, row.database, ...COUNT_COLUMNS.map((column) => String(row[column]))]),
    ['total', `${sorted.length} runs`, ...COUNT_COLUMNS.map((column) => String(total[column]))],
  ];
  const widths = lines[0]!.map((_, i) => Math.max(...lines.map((line) => line[i]!.length)));
  // Names left-aligned, counts right-aligned.
  const format = (line: string[]) => line.map((cell, i) => (i < 2 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  const rule = widths.map((width) => '-'.repeat(width)).join('  ');
  return [format(lines[0]!), rule, ...lines.slice(1, -1).map(format), rule, format(lines.at(-1)!)].join('\n');
}
