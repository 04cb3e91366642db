// The CLI in an app that runs TypeScript directly, laid out as the MikroORM guide's (src/mikro-orm.config.ts, `.js`
// import specifiers, tsx installed, nothing compiled): the packed package's own bin, under plain `node`, finds the
// config with no --config, registers tsx, and loads the config and the package.json saga module, both TypeScript.
// On each major (the app sits in the leg of the MikroORM it runs), on PostgreSQL and SQLite.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { type CliRun, cliDatabaseEnv } from '../support/cli-process.js';
import { DIALECTS, type DialectName } from '../support/databases.js';
import { seedOperatorDay } from '../support/operator-day.js';
import { LOADED_ORM_MAJOR } from '../support/orm-leg.js';
import { installPackage } from '../support/package-install.js';
import { REPO_ROOT } from '../support/repository.js';
import { useDatabase } from '../support/suite.js';

// In the leg of the major under test, so the app resolves that MikroORM (and tsx, from the repository's node_modules).
const home = LOADED_ORM_MAJOR === 7 ? join(REPO_ROOT, 'legs', 'mikro-orm-7') : REPO_ROOT;
const app = join(home, '.tmp', `typescript-app-${randomUUID().slice(0, 8)}`);

/**
 * The app's environment: no vitest variables (MikroORM and the CLI take VITEST for a process that loads TypeScript
 * itself), no leg redirect hook (the app resolves MikroORM by itself), and the test database to open.
 */
function appEnv(dialect: DialectName, location: string): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('VITEST') && name !== 'NODE_OPTIONS'));
  return { ...env, MIKRO_ORM_COLORS: 'false', SAGA_APP_DIALECT: dialect, SAGA_APP_DB: location };
}

/** `mikro-orm-saga <args>` as the app's package.json scripts run it: its bin, under plain `node`, in the app folder. */
function appCli(env: NodeJS.ProcessEnv, ...args: string[]): Promise<CliRun> {
  const bin = join(app, 'node_modules', 'mikro-orm-saga', 'dist', 'src', 'cli', 'main.js');
  return new Promise((done) => {
    execFile(process.execPath, [bin, ...args], { cwd: app, env, timeout: 50_000, killSignal: 'SIGKILL' }, (error, stdout, stderr) =>
      done({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('the CLI in an app that runs TypeScript through tsx', () => {
  beforeAll(async () => {
    await installPackage(app);
    await cp(join(REPO_ROOT, 'test', 'fixtures', 'typescript-app'), app, { recursive: true });
    const manifest = JSON.parse(await readFile(join(app, 'package.json'), 'utf8'));
    manifest['mikro-orm-saga'] = { sagas: './src/order-saga.ts' };
    // As an app lists them: the CLI imports the drivers listed before it registers tsx (docs/operations.md).
    manifest.dependencies = { '@mikro-orm/core': '*', '@mikro-orm/postgresql': '*', '@mikro-orm/sqlite': '*', 'mikro-orm-saga': '*' };
    manifest.devDependencies = { tsx: '*' };
    await writeFile(join(app, 'package.json'), JSON.stringify(manifest, null, 2));
  }, 180_000);
  afterAll(() => rm(app, { recursive: true, force: true }));

  for (const dialect of DIALECTS.filter((d) => d !== 'better-sqlite')) {
    describe(`on ${dialect}`, () => {
      const db = useDatabase(dialect, [ScriptedSaga]);
      beforeAll(() => seedOperatorDay(db().orm));

      it('finds src/mikro-orm.config.ts, loads it and the .ts saga module through tsx, and runs the commands', async () => {
        const env = appEnv(dialect, cliDatabaseEnv(db()).SAGA_TEST_LOCATION!);
        const [count, dead] = await Promise.all([
          appCli(env, 'sagas', 'count'),
          appCli(env, 'timers', 'list', '--status', 'dead_lettered', '--json'),
        ]);
        expect(count, count.stderr).toMatchObject({ code: 0, stdout: expect.stringMatching(/^TYPE\s+ACTIVE\nscripted\s+2\n$/) });
        expect(dead.code, dead.stderr).toBe(0);
        expect(JSON.parse(dead.stdout).items).toEqual([
          expect.objectContaining({ name: 'payment-timeout', sagaType: 'scripted', attempts: 2 }),
        ]);
      });
    });
  }
});
