/**
 * The vitest reporter of `npm run test:reliability` (vitest.reliability.config.ts): at the end of the run it
 * reads each reliability-tagged test's figures from its metadata, prints the summary table and fails the run
 * (exit code 1) when a scenario lost or doubled work, did not pass, or reported nothing.
 */
import type { Reporter, TestModule } from 'vitest/node';
import { RELIABILITY_TAG, type ReliabilityTestReport, summarizeReliability } from './reliability-summary.js';

export default class ReliabilityReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const reports: ReliabilityTestReport[] = [];
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        if (!test.tags.includes(RELIABILITY_TAG)) continue;
        reports.push({ name: test.fullName, state: test.result().state, figures: test.meta().reliability });
      }
    }
    const { table, problems } = summarizeReliability(reports);
    const leg = process.env.MIKRO_ORM_LEG === '7' ? 'MikroORM 7 leg' : 'MikroORM 6';
    const out = ['', `Reliability summary (npm run test:reliability, ${leg})`, '', table, ''];
    if (problems.length === 0) out.push('PASS: every scenario reported on every database; nothing lost, nothing applied twice.');
    else out.push('FAIL:', ...problems.map((problem) => `  - ${problem}`));
    process.stdout.write(`${out.join('\n')}\n\n`);
    // vitest sets the exit code only for failed tests; it keeps one set here.
    if (problems.length > 0) process.exitCode = 1;
  }
}
