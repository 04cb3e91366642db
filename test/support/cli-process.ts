import { execFile } from 'node:child_process';
import { resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..', '..');

/** What a CLI run printed, and its exit code. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `mikro-orm-saga` from the sources (`src/cli/main.ts` through tsx) as a subprocess in `cwd`, stdin not
 * a terminal. `env` is added to the test's environment.
 */
export function runCliProcess(args: readonly string[], cwd: string, env: Record<string, string> = {}): Promise<CliRun> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', resolve(root, 'src', 'cli', 'main.ts'), ...args],
      { cwd, env: { ...process.env, ...env, MIKRO_ORM_COLORS: 'false' } },
      (error, stdout, stderr) => done({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}
