// The reliability summary (printed by `npm test` and `npm run test:reliability`), fed made-up per-test metadata:
// its table, which runs it judges and how strictly, and when it fails the run.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { TestModule } from 'vitest/node';
import {
  RELIABILITY_DATABASES,
  RELIABILITY_FILES,
  RELIABILITY_SCENARIOS,
  type ReliabilityFigures,
  type ReliabilityScenario,
} from '../support/reliability-figures.js';
import ReliabilityReporter, { type ReliabilityReporterOptions } from '../support/reliability-reporter.js';
import { isWholeRun, type ReliabilityTestReport, summarizeReliability } from '../support/reliability-summary.js';

function figures(scenario: ReliabilityScenario, database: string, overrides: Partial<ReliabilityFigures> = {}): ReliabilityFigures {
  return { scenario, database, processes: 3, load: 100, kills: 1, restarts: 1, dbFaults: 2, hostile: 5, lost: 0, twice: 0, ...overrides };
}

/** One passed report per scenario and database, each with the figures above. */
function everyScenario(): ReliabilityTestReport[] {
  return (Object.keys(RELIABILITY_SCENARIOS) as ReliabilityScenario[]).flatMap((scenario) =>
    RELIABILITY_DATABASES.map((database) => ({ name: `${scenario} (${database})`, state: 'passed', figures: figures(scenario, database) })),
  );
}

describe('reliability summary', () => {
  it('every scenario on every database, nothing lost or doubled: no problems, one row each and the totals', () => {
    const { table, problems } = summarizeReliability(everyScenario());
    expect(problems).toEqual([]);
    const lines = table.split('\n');
    expect(lines[0]).toMatch(/^scenario\s+database\s+processes\s+load\s+kills\s+restarts\s+db faults\s+hostile\s+lost\s+twice$/);
    expect(lines.filter((line) => / (postgresql|sqlite) /.test(line))).toHaveLength(8);
    expect(lines.at(-1)).toMatch(/^total\s+8 runs\s+24\s+800\s+8\s+8\s+16\s+40\s+0\s+0$/);
    // Rows in the order of RELIABILITY_SCENARIOS, PostgreSQL before SQLite.
    expect(lines[2]).toMatch(/^kill-restart\s+postgresql /);
    expect(lines[3]).toMatch(/^kill-restart\s+sqlite /);
  });

  it('a lost and a doubled unit of work are each a problem, and show in the totals', () => {
    const reports = everyScenario().map((report) =>
      report.name === 'crash-poison (sqlite)' ? { ...report, figures: figures('crash-poison', 'sqlite', { lost: 2, twice: 1 }) } : report,
    );
    const { table, problems } = summarizeReliability(reports);
    expect(problems).toEqual(['crash-poison on sqlite: 2 unit(s) of work lost', 'crash-poison on sqlite: 1 unit(s) of work applied twice']);
    expect(table.split('\n').at(-1)).toMatch(/\s2\s+1$/);
  });

  it('a scenario that reported nothing, one that passed silently, and one that failed are problems', () => {
    const reports = everyScenario().filter((report) => report.name !== 'kill-restart (sqlite)');
    reports.push({ name: 'silent', state: 'passed', figures: undefined });
    reports.push({ name: 'broken', state: 'failed', figures: undefined });
    reports.push({ name: 'skipped', state: 'skipped', figures: undefined });
    expect(summarizeReliability(reports).problems).toEqual([
      '"silent" passed but reported no figures',
      '"broken" did not pass (failed)',
      '"skipped" was skipped',
      'kill-restart on sqlite: no test reported figures',
    ]);
  });

  it('no reports at all: every scenario and database is missing', () => {
    expect(summarizeReliability([]).problems).toHaveLength(8);
  });

  it('judging only the tests that ran: a skipped test and an unreported scenario are no problem; a silent, failed or lossy one is', () => {
    const ranClean = { name: 'crash-poison (sqlite)', state: 'passed', figures: figures('crash-poison', 'sqlite') };
    const clean = summarizeReliability([ranClean, { name: 'filtered out', state: 'skipped', figures: undefined }], { complete: false });
    expect(clean.problems).toEqual([]);
    expect(clean.table.split('\n').filter((line) => / (postgresql|sqlite) /.test(line))).toHaveLength(1);

    const lossy = { name: 'lossy', state: 'passed', figures: figures('kill-restart', 'postgresql', { lost: 1 }) };
    const silent = { name: 'silent', state: 'passed', figures: undefined };
    const broken = { name: 'broken', state: 'failed', figures: undefined };
    const cut = { name: 'cut short', state: 'pending', figures: undefined };
    expect(summarizeReliability([ranClean, lossy, silent, broken, cut], { complete: false }).problems).toEqual([
      '"silent" passed but reported no figures',
      '"broken" did not pass (failed)',
      '"cut short" did not pass (pending)',
      'kill-restart on postgresql: 1 unit(s) of work lost',
    ]);
  });

  it('a run is whole when it ran every scenario file and was not narrowed to some tests', () => {
    const all = RELIABILITY_FILES.map((file) => `/repo/${file}`);
    expect(isWholeRun([...all, '/repo/test/unit/other.test.ts'], false)).toBe(true);
    expect(isWholeRun(all, true)).toBe(false);
    expect(isWholeRun(all.slice(1), false)).toBe(false);
    expect(isWholeRun([], false)).toBe(false);
  });
});

describe('reliability reporter', () => {
  const exitCode = process.exitCode;
  afterEach(() => {
    process.exitCode = exitCode;
    vi.restoreAllMocks();
  });

  /** A test module as vitest hands it to reporters, holding `reports` as tagged tests plus one untagged test. */
  function moduleOf(moduleId: string, reports: ReliabilityTestReport[]): TestModule {
    const tests = reports.map((report) => ({
      tags: ['reliability'],
      fullName: report.name,
      result: () => ({ state: report.state }),
      meta: () => ({ reliability: report.figures }),
    }));
    tests.push({ tags: [], fullName: 'untagged', result: () => ({ state: 'failed' }), meta: () => ({ reliability: undefined }) });
    return { moduleId, children: { allTests: () => tests.values() } } as unknown as TestModule;
  }

  /** How a run was narrowed, as the reporter reads it from vitest. */
  interface Narrowing {
    readonly namePattern?: RegExp;
    readonly tagsFilter?: string[];
    /** What each file's specification was narrowed to. */
    readonly spec?: { testLines?: number[]; testIds?: string[]; testNamePattern?: RegExp; testTagsFilter?: string[] };
  }

  /**
   * Runs the reporter over one module per file of `files` (the reports in the first), narrowed as `narrowing`
   * says; returns what it printed.
   */
  function run(
    reports: ReliabilityTestReport[],
    {
      files = [...RELIABILITY_FILES],
      narrowing = {},
      options,
    }: { files?: string[]; narrowing?: Narrowing; options?: ReliabilityReporterOptions } = {},
  ): string {
    const written: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    process.exitCode = undefined;
    const reporter = new ReliabilityReporter(options);
    reporter.onInit({ getGlobalTestNamePattern: () => narrowing.namePattern, config: { tagsFilter: narrowing.tagsFilter } });
    reporter.onTestRunStart(
      files.map(() => ({
        testLines: undefined,
        testIds: undefined,
        testNamePattern: undefined,
        testTagsFilter: undefined,
        ...narrowing.spec,
      })),
    );
    reporter.onTestRunEnd(files.map((file, i) => moduleOf(`/repo/${file}`, i === 0 ? reports : [])));
    return written.join('');
  }

  it('prints the table and PASS, and leaves the exit code alone, when every scenario reported clean figures', () => {
    const out = run(everyScenario());
    expect(out).toMatch(/Reliability summary \(MikroORM [67][^,]*, every scenario\)/);
    expect(out).toMatch(/total\s+8 runs/);
    expect(out).toContain('PASS: every scenario reported on every database');
    expect(process.exitCode).toBeUndefined();
  });

  it('a whole run (npm test): FAIL with the reasons and exit code 1 when a scenario is missing or a tagged test was skipped', () => {
    const out = run([...everyScenario().slice(1), { name: 'skipped', state: 'skipped', figures: undefined }]);
    expect(out).toContain('FAIL:\n  - "skipped" was skipped\n  - kill-restart on postgresql: no test reported figures');
    expect(process.exitCode).toBe(1);
  });

  it('a run of other files only: prints nothing and leaves the exit code alone', () => {
    expect(run([], { files: ['test/unit/other.test.ts'] })).toBe('');
    expect(process.exitCode).toBeUndefined();
  });

  it('a run narrowed to some tests that skipped every tagged one: prints nothing and leaves the exit code alone', () => {
    const skipped = everyScenario().map((report) => ({ ...report, state: 'skipped', figures: undefined }));
    expect(run(skipped, { narrowing: { namePattern: /no scenario/ } })).toBe('');
    expect(process.exitCode).toBeUndefined();
  });

  it('a run of one scenario file: judges only the scenarios that ran, PASS with their rows', () => {
    const poison = everyScenario().filter((report) => report.figures?.scenario === 'crash-poison');
    const out = run(poison, { files: ['test/reliability/dispatcher-processes.test.ts', 'test/unit/other.test.ts'] });
    expect(out).toMatch(/Reliability summary \(MikroORM [67][^,]*, the scenarios that ran\)/);
    expect(out).toMatch(/total\s+2 runs/);
    expect(out).toContain('PASS: every scenario that ran reported');
    expect(process.exitCode).toBeUndefined();
  });

  it.each<[string, Narrowing]>([
    ['a test name pattern (-t)', { namePattern: /sqlite/ }],
    ['a tags filter', { tagsFilter: ['reliability'] }],
    ["a file's lines", { spec: { testLines: [20] } }],
    ["a file's test ids", { spec: { testIds: ['abc_0_1'] } }],
    ["a file's test name pattern", { spec: { testNamePattern: /sqlite/ } }],
    ["a file's tags filter", { spec: { testTagsFilter: ['reliability'] } }],
  ])('a run of every file narrowed by %s: skipped tagged tests and missing scenarios are not judged', (_, narrowing) => {
    const sqlite = everyScenario().map((report) =>
      report.name.includes('sqlite') ? report : { ...report, state: 'skipped', figures: undefined },
    );
    const out = run(sqlite, { narrowing });
    expect(out).toContain('PASS: every scenario that ran reported');
    expect(out).toMatch(/total\s+4 runs/);
    expect(process.exitCode).toBeUndefined();
  });

  it('a narrowed run still fails when a tagged test that ran reported nothing, or lost work', () => {
    const reports = [
      { name: 'silent', state: 'passed', figures: undefined },
      { name: 'lossy', state: 'passed', figures: figures('same-message-ids', 'sqlite', { twice: 3 }) },
      { name: 'filtered out', state: 'skipped', figures: undefined },
    ];
    const out = run(reports, { narrowing: { namePattern: /sqlite/ } });
    expect(out).toContain(
      'FAIL:\n  - "silent" passed but reported no figures\n  - same-message-ids on sqlite: 3 unit(s) of work applied twice',
    );
    expect(process.exitCode).toBe(1);
  });

  it('with everyScenario (npm run test:reliability): a narrowed run fails for the scenarios it left out', () => {
    const poison = everyScenario().filter((report) => report.figures?.scenario === 'crash-poison');
    const out = run(poison, {
      files: ['test/reliability/dispatcher-processes.test.ts'],
      narrowing: { tagsFilter: ['reliability'] },
      options: { everyScenario: true },
    });
    expect(out).toMatch(/Reliability summary \(MikroORM [67][^,]*, every scenario\)/);
    expect(out).toContain('  - kill-restart on postgresql: no test reported figures');
    expect(out).not.toContain('crash-poison on');
    expect(process.exitCode).toBe(1);
  });
});

describe('reliability reporter settings', () => {
  it('npm test reports the summary (the MikroORM 7 leg extends its config); npm run test:reliability requires every scenario', async () => {
    const reporters = (config: { test?: { reporters?: unknown } }) => config.test?.reporters;
    const main = (await import('../../vitest.config.js')).default;
    expect(reporters(main)).toEqual(['default', './test/support/reliability-reporter.ts']);
    const reliability = (await import('../../vitest.reliability.config.js')).default;
    expect(reporters(reliability)).toEqual(['default', ['./test/support/reliability-reporter.ts', { everyScenario: true }]]);
  });
});
