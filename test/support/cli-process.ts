import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as core from '@mikro-orm/core';
import { runCli } from '../../src/cli/run-cli.js';
import type { TestDatabase } from './databases.js';
import { repoPath } from './repository.js';

const fixtures = repoPath('test', 'fixtures');

/** What a CLI run printed, and its exit code. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The test fixtures' MikroORM config (test/fixtures/cli.config.ts). */
const FIXTURE_CONFIG = join(fixtures, 'cli.config.ts');

/** The flags that point the CLI at the test fixtures' config and sagas. */
export const FIXTURE_FLAGS = ['--config', FIXTURE_CONFIG, '--sagas', join(fixtures, 'scripted-saga.ts')];

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
      ['--import', 'tsx', repoPath('src', 'cli', 'main.ts'), ...args],
      // A hung CLI is killed rather than left running after the test gave up on it.
      { cwd, env: { ...process.env, ...env, MIKRO_ORM_COLORS: 'false' }, timeout: 50_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => done({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * Runs the CLI in this process through `runCli`, as {@link runCliProcess} runs it in a subprocess: from `cwd`
 * (where package.json `mikro-orm-saga.sagas` is read; MikroORM's own package.json `mikro-orm.configPaths` is
 * read from `process.cwd()`, so pass `--config`), `env` set for the run and restored after it, no terminal,
 * each line written with a newline as the process writes it. The ORM the command opens is closed by `runCli`.
 * @throws Error when the run left `process.exitCode` changed.
 */
export async function runCliInProcess(args: readonly string[], cwd: string, env: Record<string, string> = {}): Promise<CliRun> {
  useTestImports();
  const saved = Object.entries(env).map(([name]) => [name, process.env[name]] as const);
  const exitCode = process.exitCode;
  let stdout = '';
  let stderr = '';
  Object.assign(process.env, env);
  try {
    const io = { cwd, stdout: (t: string) => (stdout += `${t}\n`), stderr: (t: string) => (stderr += `${t}\n`), ask: undefined };
    const code = await runCli(args, io);
    if (process.exitCode !== exitCode) throw new Error(`the CLI run set process.exitCode to ${process.exitCode}`);
    return { code, stdout, stderr };
  } finally {
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

/**
 * MikroORM 6 imports the config file from its own (CommonJS, not transformed) code, where Node 20 cannot load
 * TypeScript: route its imports through the test's module loader, as tsx does for the subprocess. (MikroORM 7
 * has no such hook; the CLI imports the file itself there, through the same loader.)
 */
function useTestImports(): void {
  const utils = core.Utils as unknown as { setDynamicImportProvider?: (provider: (id: string) => Promise<unknown>) => void };
  utils.setDynamicImportProvider?.((id) => import(id));
}

/**
 * An app folder whose package.json points the CLI at the fixtures' config (`mikro-orm.configPaths`) and sagas
 * (`mikro-orm-saga.sagas`), as an application's would; `cli(...)` runs the CLI there on `db()`.
 */
export function cliApp(db: () => TestDatabase) {
  const dir = repoPath('.tmp', `cli-${randomUUID().slice(0, 8)}`);
  return {
    dir,
    async create(): Promise<void> {
      await mkdir(dir, { recursive: true });
      const manifest = {
        name: 'cli-app',
        private: true,
        type: 'module',
        'mikro-orm': { configPaths: [FIXTURE_CONFIG] },
        'mikro-orm-saga': { sagas: join(fixtures, 'scripted-saga.ts') },
      };
      await writeFile(join(dir, 'package.json'), JSON.stringify(manifest));
    },
    remove: () => rm(dir, { recursive: true, force: true }),
    /** The CLI as a subprocess in the folder: the config and the sagas found from its package.json. */
    cli: (...args: string[]) => runCliProcess(args, dir, cliDatabaseEnv(db())),
    /** The CLI in this process from the folder: the sagas found from its package.json, the config from `--config`. */
    cliInProcess: (...args: string[]) => runCliInProcess([...args, '--config', FIXTURE_CONFIG], dir, cliDatabaseEnv(db())),
  };
}
