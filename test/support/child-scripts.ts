/**
 * The entry points of the tests' child processes (dispatcher-process.ts, handler-process.ts, stager-process.ts), built
 * into plain JavaScript with vite once per test file: node starts such a child in about a third of the CPU time
 * `node --import tsx` takes (tsx transforms and resolves every module, MikroORM's included, through its loader).
 * Packages stay imports, resolved from the repository's node_modules as before (on the MikroORM 7 leg,
 * `@mikro-orm/*` from the leg, through NODE_OPTIONS, as in any process).
 */
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { repoPath } from './repository.js';

/** The child scripts, by name; each is `test/support/<name>.ts`. */
export type ChildScript = 'dispatcher-process' | 'handler-process' | 'stager-process';
const SCRIPTS: readonly ChildScript[] = ['dispatcher-process', 'handler-process', 'stager-process'];

/** Where the running test file's build is (a worker runs one file at a time). */
let current: string | undefined;

/** Builds the child scripts under `.tmp/` before the file's tests, and removes them afterwards. */
export function useChildScripts(): void {
  let dir: string | undefined;
  beforeAll(async () => {
    dir = repoPath('.tmp', `child-scripts-${randomUUID().slice(0, 8)}`);
    await build(dir);
    current = dir;
  });
  afterAll(async () => {
    current = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  });
}

/**
 * The arguments of `node` that run `script` with `args`: the test file's build, or the source through tsx in a
 * process that built none (the benchmarks, a test file that did not call `useChildScripts()`).
 */
export function childCommand(script: ChildScript, args: readonly string[]): string[] {
  if (!current) return ['--import', 'tsx', repoPath('test', 'support', `${script}.ts`), ...args];
  return [join(current, `${script}.mjs`), ...args];
}

async function build(outDir: string): Promise<void> {
  const { build: viteBuild } = await import('vite');
  await viteBuild({
    configFile: false,
    root: repoPath(),
    logLevel: 'warn',
    build: {
      // A build for Node: every package stays an import.
      ssr: true,
      outDir,
      emptyOutDir: true,
      minify: false,
      target: 'node20',
      rolldownOptions: {
        input: Object.fromEntries(SCRIPTS.map((script) => [script, repoPath('test', 'support', `${script}.ts`)])),
        output: { format: 'esm', entryFileNames: '[name].mjs', chunkFileNames: '[name]-[hash].mjs' },
      },
    },
  });
}
