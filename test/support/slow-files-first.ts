// The order vitest hands test files to its workers. A fresh clone has no timings from an earlier run, so vitest
// would start with the largest files and could leave a slow one for last, running alone while the other worker
// idles. The files below take the longest (measured on 2 cores); they start first, in this order, and the rest
// follow in vitest's own order. A stale list costs minutes, never correctness.
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const SLOW_FILES = [
  'test/packaging/existing-app.test.ts',
  'test/bench/smoke.test.ts',
  'test/reliability/dispatcher-processes.test.ts',
  'test/reliability/dispatcher-process-faults.test.ts',
  'test/dispatcher/claim/sqlite-default-batch-size.test.ts',
  'test/packaging/package-v7.test.ts',
  'test/packaging/package.test.ts',
  'test/schema/migrations.test.ts',
  'test/reliability/idempotency-processes.test.ts',
  'test/bench/only.test.ts',
  'test/cli/cli.test.ts',
  'test/cli/typescript-app.test.ts',
  'test/transactions/sqlite/deferred-begin-atomicity.test.ts',
  'test/reliability/dispatcher-processes.postgres.test.ts',
  'test/operations/concurrent-purges.test.ts',
];

/** Where a file stands in {@link SLOW_FILES}; files not listed come after all of them. */
function rank(spec: TestSpecification): number {
  const at = SLOW_FILES.findIndex((file) => spec.moduleId.endsWith(`/${file}`));
  return at < 0 ? SLOW_FILES.length : at;
}

export class SlowFilesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    // Array.prototype.sort is stable: files of equal rank keep vitest's order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
