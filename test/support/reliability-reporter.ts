/**
 * The vitest reporter of the reliability summary, in `npm test` (vitest.config.ts) and `npm run test:reliability`
 * (vitest.reliability.config.ts). At the end of the run it reads each reliability-tagged test's figures from its
 * metadata, prints the summary table and fails the run (exit code 1) when a scenario lost or doubled work, did
 * not pass, or ran and reported nothing.
 *
 * A run of every scenario file not narrowed by test name, tag, line or id (`npm test`), and every run with
 * `everyScenario` (`npm run test:reliability`), must also show every scenario on every database, none skipped.
 * A narrowed run is judged on the tagged tests that ran; with none it prints nothing.
 */
import type { Reporter, TestModule, TestSpecification, Vitest } from 'vitest/node';
import { isWholeRun, RELIABILITY_TAG, type ReliabilityTestReport, ran, summarizeReliability } from './reliability-summary.js';

export interface ReliabilityReporterOptions {
  /** Every scenario must report on every database, however the run was narrowed. */
  readonly everyScenario?: boolean;
}

/** What the reporter reads of the Vitest instance. */
type RunFilters = Pick<Vitest, 'getGlobalTestNamePattern'> & { readonly config: Pick<Vitest['config'], 'tagsFilter'> };

/** What the reporter reads of a file's specification: what inside it the run was narrowed to. */
type SpecificationFilters = Pick<TestSpecification, 'testLines' | 'testIds' | 'testNamePattern' | 'testTagsFilter'>;

export default class ReliabilityReporter implements Reporter {
  private vitest: RunFilters | undefined;
  private specifications: readonly SpecificationFilters[] = [];

  constructor(private readonly options: ReliabilityReporterOptions = {}) {}

  onInit(vitest: RunFilters): void {
    this.vitest = vitest;
  }

  onTestRunStart(specifications: ReadonlyArray<SpecificationFilters>): void {
    this.specifications = specifications;
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const reports: ReliabilityTestReport[] = [];
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        if (!test.tags.includes(RELIABILITY_TAG)) continue;
        reports.push({ name: test.fullName, state: test.result().state, figures: test.meta().reliability });
      }
    }
    const complete =
      this.options.everyScenario === true ||
      isWholeRun(
        testModules.map((module) => module.moduleId),
        this.narrowed(),
      );
    if (!complete && !reports.some(ran)) return;
    const { table, problems } = summarizeReliability(reports, { complete });
    const leg = process.env.MIKRO_ORM_LEG === '7' ? 'MikroORM 7 leg' : 'MikroORM 6';
    const scope = complete ? 'every scenario' : 'the scenarios that ran';
    const out = ['', `Reliability summary (${leg}, ${scope})`, '', table, ''];
    if (problems.length > 0) out.push('FAIL:', ...problems.map((problem) => `  - ${problem}`));
    else if (complete) out.push('PASS: every scenario reported on every database; nothing lost, nothing applied twice.');
    else out.push('PASS: every scenario that ran reported; nothing lost, nothing applied twice.');
    process.stdout.write(`${out.join('\n')}\n\n`);
    // vitest sets the exit code only for failed tests; it keeps one set here.
    if (problems.length > 0) process.exitCode = 1;
  }

  /** Whether the run was narrowed to some tests: by name (-t), by tag, or a file's lines or test ids. */
  private narrowed(): boolean {
    if (this.vitest?.getGlobalTestNamePattern() || (this.vitest?.config.tagsFilter?.length ?? 0) > 0) return true;
    return this.specifications.some(
      (spec) =>
        (spec.testLines?.length ?? 0) > 0 ||
        (spec.testIds?.length ?? 0) > 0 ||
        spec.testNamePattern ||
        (spec.testTagsFilter?.length ?? 0) > 0,
    );
  }
}
