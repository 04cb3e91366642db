// Checks the published API against the committed reports (api/<entry>.api.md), one per package entry point.
//   tsx api/extract.ts            fails when an entry's API differs from its report, or a published type
//                                 refers to a declaration no entry point exports (npm run lint)
//   tsx api/extract.ts --update   rewrites the reports after an intended change (npm run api)
// The declarations are built as `npm run build` builds them (tsconfig.build.json, `@internal` stripped), into a
// scratch folder, so the check needs no prior build.
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Extractor, ExtractorConfig, type ExtractorMessage } from '@microsoft/api-extractor';

const root = resolve(import.meta.dirname, '..');
const scratch = join(root, '.tmp', 'api');
/** The package's entry points, by report name; the root entry first, as the others may name its exports. */
const ENTRIES = ['index', 'testing', 'operations', 'migrations'] as const;
const update = process.argv.includes('--update');

/** The names the root entry exports, read from the report it just produced. */
function rootExports(): Set<string> {
  const report = readFileSync(join(scratch, 'report', 'index.api.md'), 'utf8');
  const declared = report.matchAll(/^export (?:declare )?(?:abstract )?(?:class|interface|type|function|const|enum) (\w+)/gm);
  return new Set([...declared].map((match) => match[1] as string));
}

/**
 * A subpath entry may refer to a type the root entry exports (`mikro-orm-saga/testing` takes a `SagaDispatcher`):
 * the user imports it from `mikro-orm-saga`. Any other declaration it refers to is an internal one.
 */
function exportedByRoot(message: ExtractorMessage, exported: Set<string>): boolean {
  if (message.messageId !== 'ae-forgotten-export') return false;
  const symbol = /The symbol "(\w+)"/.exec(message.text)?.[1];
  return symbol !== undefined && exported.has(symbol);
}

/** Runs API Extractor on one entry; false when it found a problem or, checking, a change of the API. */
function extract(entry: (typeof ENTRIES)[number], exported: Set<string>): boolean {
  const config = ExtractorConfig.loadFileAndPrepare(join(root, 'api', `${entry}.api-extractor.json`));
  let problems = 0;
  const result = Extractor.invoke(config, {
    localBuild: update,
    messageCallback: (message) => {
      const known = message.messageId === 'console-compiler-version-notice' || (entry !== 'index' && exportedByRoot(message, exported));
      if (known) message.handled = true;
      // The report's own notices (created, changed, updated) are judged by apiReportChanged below.
      else if (/^(error|warning)$/.test(message.logLevel) && !message.messageId.startsWith('console-api-report')) problems += 1;
    },
  });
  if (result.apiReportChanged && !update) {
    console.error(`The API of entry '${entry}' changed: review it, then run \`npm run api\` and commit api/${entry}.api.md.`);
    return false;
  }
  return problems === 0;
}

rmSync(scratch, { recursive: true, force: true });
execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json', '--outDir', join(scratch, 'dist')], {
  cwd: root,
  stdio: 'inherit',
});
let exported = new Set<string>();
let failed = false;
for (const entry of ENTRIES) {
  if (!extract(entry, exported)) failed = true;
  if (entry === 'index') exported = rootExports();
}
if (failed) process.exit(1);
