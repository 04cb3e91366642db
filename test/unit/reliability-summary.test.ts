// The summary of `npm run test:reliability`, fed made-up per-test metadata: its table, and when it fails the run.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { TestModule } from 'vitest/node';
import {
  RELIABILITY_DATABASES,
  RELIABILITY_SCENARIOS,
  type ReliabilityFigures,
  type ReliabilityScenario,
} from '../support/reliability-figures.js';
import ReliabilityReporter from '../support/reliability-reporter.js';
import { type ReliabilityTestReport, summarizeReliability } from '../support/reliability-summary.js';

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
});

describe('reliability reporter', () => {
  const exitCode = process.exitCode;
  afterEach(() => {
    process.exitCode = exitCode;
    vi.restoreAllMocks();
  });

  /** A test module as vitest hands it to reporters, holding `reports` as tagged tests plus one untagged test. */
  function moduleOf(reports: ReliabilityTestReport[]): TestModule {
    const tests = reports.map((report) => ({
      tags: ['reliability'],
      fullName: report.name,
      result: () => ({ state: report.state }),
      meta: () => ({ reliability: report.figures }),
    }));
    tests.push({ tags: [], fullName: 'untagged', result: () => ({ state: 'failed' }), meta: () => ({ reliability: undefined }) });
    return { children: { allTests: () => tests.values() } } as unknown as TestModule;
  }

  function run(reports: ReliabilityTestReport[]): string {
    const written: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    process.exitCode = undefined;
    new ReliabilityReporter().onTestRunEnd([moduleOf(reports)]);
    return written.join('');
  }

  it('prints the table and PASS, and leaves the exit code alone, when every scenario reported clean figures', () => {
    const out = run(everyScenario());
    expect(out).toContain('Reliability summary');
    expect(out).toMatch(/total\s+8 runs/);
    expect(out).toContain('PASS');
    expect(process.exitCode).toBeUndefined();
  });

  it('prints FAIL with the reasons and sets exit code 1 when a scenario is missing', () => {
    const out = run(everyScenario().slice(1));
    expect(out).toContain('FAIL:\n  - kill-restart on postgresql: no test reported figures');
    expect(process.exitCode).toBe(1);
  });
});
