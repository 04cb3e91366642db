import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { TestDatabase } from './databases.js';

const root = resolve(import.meta.dirname, '..', '..');
const fixtures = join(root, 'test', 'fixtures');

/** What a CLI run printed, and its exit code. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The flags that point the CLI at the test fixtures' config and sagas. */
export const FIXTURE_FLAGS = ['--config', join(fixtures, 'cli.config.ts'), '--sagas', join(fixtures, 'scripted-saga.ts')];

/** Where test/fixtures/cli.config.ts finds the test database. */
export function cliDatabaseEnv(db: TestDatabase): Record<string, string> {
  const location = db.dialect === 'postgresql' ? String(db.config.clientUrl) : String(db.config.dbName);
  return { SAGA_TEST_DIALECT: db.dialect, SAGA_TEST_LOCATION: location };
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
      // A hung CLI is killed rather than left running after the test gave up on it.
      { cwd, env: { ...process.env, ...env, MIKRO_ORM_COLORS: 'false' }, timeout: 50_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => done({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * An app folder whose package.json points the CLI at the fixtures' config (`mikro-orm.configPaths`) and sagas
 * (`mikro-orm-saga.sagas`), as an application's would; `cli(...)` runs the CLI there on `db()`.
 */
export function cliApp(db: () => TestDatabase) {
  const dir = join(root, '.tmp', `cli-${randomUUID().slice(0, 8)}`);
  return {
    dir,
    async create(): Promise<void> {
      await mkdir(dir, { recursive: true });
      const manifest = {
        name: 'cli-app',
        private: true,
        type: 'module',
        'mikro-orm': { configPaths: [join(fixtures, 'cli.config.ts')] },
        'mikro-orm-saga': { sagas: join(fixtures, 'scripted-saga.ts') },
      };
      await writeFile(join(dir, 'package.json'), JSON.stringify(manifest));
    },
    remove: () => rm(dir, { recursive: true, force: true }),
    cli: (...args: string[]) => runCliProcess(args, dir, cliDatabaseEnv(db())),
  };
}
