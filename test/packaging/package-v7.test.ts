// The published package in a separate MikroORM 7 application (docs: README "MikroORM 7"): the tarball installs
// there, type-checks against 7's types, and works with entities written with ES decorators and with
// `defineEntity`, on SQLite and PostgreSQL; the app's own 7 CLI generates migrations that keep the library's
// filtered indexes. Runs in the v7 leg only (`npm run test:v7`); the 6 leg has test/packaging/package.test.ts.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOADED_ORM_MAJOR } from '../support/orm-leg.js';
import { appRunner, compileApp, installPackage, itWorksInTheApp, withPostgresDatabase } from '../support/package-install.js';
import { REPO_ROOT } from '../support/repository.js';

const run = promisify(execFile);
const leg = join(REPO_ROOT, 'legs', 'mikro-orm-7');
// Inside the leg, so the app resolves its @mikro-orm/* packages (7.x) from the leg's node_modules, one copy of
// @mikro-orm/core as in a real app. The app's own CLI is the one it resolves: the leg's @mikro-orm/cli.
const app = join(leg, '.tmp', `package-app-${randomUUID().slice(0, 8)}`);
const cliEntry = join(leg, 'node_modules', '@mikro-orm', 'cli', 'cli.js');
const legManifest = JSON.parse(await readFile(join(leg, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
// A real app resolves MikroORM by itself: no redirect hook (NODE_OPTIONS) in the app's processes.
const appEnv = { ...process.env, NODE_OPTIONS: '' };

/** Lists the ORM packages as the app's dependencies (the CLI refuses to run unless `@mikro-orm/cli` is one). */
async function declareDependencies(): Promise<void> {
  const manifest = JSON.parse(await readFile(join(app, 'package.json'), 'utf8'));
  const orm = Object.entries(legManifest.devDependencies).filter(([name]) => name.startsWith('@mikro-orm/'));
  manifest.dependencies = { ...Object.fromEntries(orm), 'mikro-orm-saga': '*' };
  await writeFile(join(app, 'package.json'), JSON.stringify(manifest, null, 2));
}

const runApp = appRunner(app, appEnv);

const cli = async (command: string, dialect: string, location: string, migrations: string) => {
  const env = {
    ...appEnv,
    MIKRO_ORM_CLI_CONFIG: 'dist/mikro-orm.config.js',
    SAGA_APP_DIALECT: dialect,
    SAGA_APP_DB: location,
    SAGA_APP_MIGRATIONS: migrations,
  };
  const { stdout, stderr } = await run(process.execPath, [cliEntry, command], { cwd: app, env });
  return `${stdout}${stderr}`;
};

const expectWorks = (result: Record<string, unknown>) => {
  for (const saga of [result.subscription, result.invoice]) {
    expect(saga).toMatchObject({
      started: { outcome: 'started', version: 0, timersScheduled: 1, messagesSent: 1 },
      paid: { outcome: 'handled', version: 1, completed: true, timersCancelled: 1 },
    });
  }
  expect(result.timers).toBe(0);
  expect(result.libraryDiff).toBe('');
  expect(result.missingLibraryMigrations).toEqual([]);
  const indexes = (result.activeIndexes as string[]).map((sql) => String(sql).replaceAll('"', '').replaceAll('`', '').toLowerCase());
  expect(indexes).toEqual([
    expect.stringMatching(/\(created_at\) where \(?completed_at is null\)?/),
    expect.stringMatching(/\(created_at\) where \(?completed_at is null\)?/),
  ]);
};

describe.runIf(LOADED_ORM_MAJOR === 7)('the npm tarball in a separate MikroORM 7 app', () => {
  beforeAll(async () => {
    await installPackage(app);
    await cp(join(REPO_ROOT, 'test', 'fixtures', 'package-app-v7'), app, { recursive: true });
    for (const dialect of ['postgresql', 'sqlite']) {
      await cp(join(REPO_ROOT, 'test', 'fixtures', 'package-app', `migrations-${dialect}`), join(app, `migrations-${dialect}`), {
        recursive: true,
      });
    }
    await declareDependencies();
    await compileApp(app);
  }, 180_000);
  afterAll(() => rm(app, { recursive: true, force: true }));

  it('runs on MikroORM 7 in the app', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--input-type=module', '-e', "import { Utils } from '@mikro-orm/core'; console.log(Utils.getORMVersion())"],
      {
        cwd: app,
        env: appEnv,
      },
    );
    expect(stdout.trim()).toMatch(/^7\./);
  });

  itWorksInTheApp(runApp, expectWorks, 'default');

  for (const dialect of ['sqlite', 'postgresql'] as const) {
    it(`the app's own CLI creates a migration with the filtered unique index, then finds no changes (${dialect})`, async () => {
      const migrations = `dist/cli-migrations-${dialect}`;
      const output = await (dialect === 'sqlite'
        ? cliFlow(dialect, join(app, 'cli.sqlite'), migrations)
        : withPostgresDatabase((url) => cliFlow(dialect, url, migrations)));
      expect(output.created).toMatch(/successfully created/);
      expect(output.files).toHaveLength(1);
      expect(output.migration).toContain(
        'create unique index "saga_timer_pending_name_uniq" on "saga_timer" ("saga_type", "saga_id", "name") where "dispatched_at" is null',
      );
      for (const table of ['subscription_saga', 'invoice_saga']) {
        expect(output.migration).toMatch(
          new RegExp(`create index "${table}_completed_at_index" on "${table}" \\("created_at"\\) where "completed_at" is null`),
        );
      }
      expect(output.second).toContain('No changes required, schema is up-to-date');
      expect(output.filesAfter).toEqual(output.files);
    });
  }

  it("the package's mikro-orm-saga bin loads the app's config through MikroORM 7 and checks the schema (sqlite)", async () => {
    const location = join(app, 'bin.sqlite');
    const migrations = 'dist/bin-migrations-sqlite';
    const env = { ...appEnv, MIKRO_ORM_CLI_CONFIG: 'dist/mikro-orm.config.js', SAGA_APP_DIALECT: 'sqlite', SAGA_APP_DB: location };
    const bin = (...args: string[]) =>
      run(join(app, 'node_modules', '.bin', 'mikro-orm-saga'), args, { cwd: app, env }).then(
        ({ stdout }) => ({ code: 0, stdout, stderr: '' }),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
    const missing = await bin('verify-schema');
    expect(missing).toMatchObject({ code: 1, stderr: expect.stringContaining('DATABASE_UNREACHABLE') });
    await writeFile(location, ''); // an empty file is an empty SQLite database
    const empty = await bin('verify-schema', '--json');
    expect(empty.code, empty.stderr).toBe(3);
    expect(JSON.parse(empty.stdout).problems).toEqual(
      expect.arrayContaining([expect.objectContaining({ kind: 'table_missing', table: 'saga_timer' })]),
    );
    await cliFlow('sqlite', location, migrations);
    expect(await bin('verify-schema')).toMatchObject({ code: 0, stdout: expect.stringContaining('The schema fits') });
  });

  /** `migration:create`, `migration:up`, `migration:create` again, with the app's compiled config. */
  async function cliFlow(dialect: string, location: string, migrations: string) {
    const created = await cli('migration:create', dialect, location, migrations);
    const files = (await readdir(join(app, migrations))).filter((f) => f.endsWith('.cjs'));
    const migration = await readFile(join(app, migrations, files[0] ?? 'missing.cjs'), 'utf8');
    await cli('migration:up', dialect, location, migrations);
    const second = await cli('migration:create', dialect, location, migrations);
    const filesAfter = (await readdir(join(app, migrations))).filter((f) => f.endsWith('.cjs'));
    return { created, files, migration, second, filesAfter };
  }
});
