// examples/existing-app end to end, as docs/integration.md walks through it: an app with its own entities
// (folder-based discovery), its own migrations folder and the metadata cache on installs the npm tarball,
// generates its next migration with the MikroORM CLI, runs it, and serves HTTP with the dispatcher beside it.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SAGA_MIGRATIONS } from '../../migrations/index.js';
import { createEmptyDatabase, DIALECTS, type DialectName, type EmptyDatabase } from '../support/databases.js';
import { LOADED_ORM_MAJOR } from '../support/orm-leg.js';
import { buildApp, installPackedPackage, run } from '../support/packed-package.js';
import { REPO_ROOT } from '../support/repository.js';

const app = join(REPO_ROOT, '.tmp', `existing-app-${randomUUID().slice(0, 8)}`);
// The same app taking the library's shipped migrations instead of generating them (its node_modules linked).
const shipped = `${app}-shipped`;
const cliEntry = join(REPO_ROOT, 'node_modules', '@mikro-orm', 'cli', 'esm.js');

/** The environment of the app's processes: its database, and nothing of vitest (MikroORM reads VITEST as "TypeScript"). */
/**
 * The databases the example app is set up for: its config opens SQLite through `@mikro-orm/sqlite` only, like an
 * app that picked that driver (the better-sqlite driver is run through the behaviour suites and the CLI instead).
 */
const APP_DIALECTS = DIALECTS.filter((dialect): dialect is 'postgresql' | 'sqlite' => dialect !== 'better-sqlite');

function appEnv(db: EmptyDatabase, dialect: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('VITEST') && key !== 'DATABASE_URL'));
  const where = dialect === 'postgresql' ? { DATABASE_URL: db.location } : { SQLITE_PATH: db.location };
  return { ...env, ...where, MIKRO_ORM_COLORS: 'false', NODE_ENV: 'test', ...extra };
}

/** The app's `npm run mikro-orm -- <command>`: the MikroORM CLI through tsx, config from package.json `configPaths`. */
async function mikroOrm(env: NodeJS.ProcessEnv, command: string, cwd = app): Promise<string> {
  const cliEnv = { ...env, MIKRO_ORM_CLI_USE_TS_NODE: 'false', MIKRO_ORM_CLI_ALWAYS_ALLOW_TS: 'true' };
  const { stdout } = await run(process.execPath, ['--import', 'tsx', cliEntry, command], { cwd, env: cliEnv });
  return stdout;
}

interface AppLine {
  readonly event: string;
  readonly [key: string]: unknown;
}

/** The server as a subprocess, its JSON lines awaited as events (bounded: a missing line fails the test). */
function startServer(env: NodeJS.ProcessEnv) {
  const child: ChildProcess = spawn(process.execPath, ['dist/server.js'], { cwd: app, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: AppLine[] = [];
  const waiters: { match: (line: AppLine) => boolean; resolve: (line: AppLine) => void }[] = [];
  let stderr = '';
  child.stderr!.on('data', (chunk) => {
    stderr += chunk;
  });
  createInterface({ input: child.stdout! }).on('line', (text) => {
    if (!text.startsWith('{')) return;
    const line = JSON.parse(text) as AppLine;
    lines.push(line);
    for (const waiter of waiters.filter((w) => w.match(line))) waiter.resolve(line);
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const next = (match: (line: AppLine) => boolean, what: string, timeoutMs = 30_000) =>
    new Promise<AppLine>((resolve, reject) => {
      const seen = lines.find(match);
      if (seen) return resolve(seen);
      const timer = setTimeout(
        () => reject(new Error(`no ${what} line from the app within ${timeoutMs} ms; stderr:\n${stderr}`)),
        timeoutMs,
      );
      waiters.push({
        match,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      });
      void exited.then((code) => reject(new Error(`the app exited (${code}) before ${what}; stderr:\n${stderr}`)));
    });
  return { child, exited, next, stderr: () => stderr };
}

/** The installed package's `bin`, in the app's folder: config and sagas found through package.json. */
async function operatorCli(env: NodeJS.ProcessEnv, ...args: string[]): Promise<{ code: number; stdout: string }> {
  const bin = join(app, 'node_modules', '.bin', 'mikro-orm-saga');
  return run(bin, args, { cwd: app, env }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (error: { code: number; stdout: string }) => ({ code: error.code, stdout: error.stdout }),
  );
}

/** After the HTTP flow: o-1 cancelled by its fired timer, o-2 paid; nothing dead-lettered; the schema fits. */
async function expectOperatorCli(env: NodeJS.ProcessEnv): Promise<void> {
  const sagas = await operatorCli(env, 'sagas', 'list', '--type', 'order', '--json');
  expect(sagas.code).toBe(0);
  const listed = JSON.parse(sagas.stdout).items.map((s: { correlation: string; step: string }) => [s.correlation, s.step]);
  expect(listed).toEqual([
    ['o-2', 'Paid'],
    ['o-1', 'Cancelled'],
  ]);
  const fired = await operatorCli(env, 'timers', 'list', '--status', 'fired');
  expect(fired.stdout).toMatch(/fired\s+order\s+\S+\s+payment-timeout\s+PaymentTimedOut/);
  expect(await operatorCli(env, 'verify-schema')).toMatchObject({ code: 0 });
  expect(await operatorCli(env, 'timers', 'cancel', randomUUID())).toMatchObject({ code: 2 }); // no terminal, no --yes
}

async function post(port: number, path: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', body: JSON.stringify(body) });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

describe('docs/integration.md', () => {
  it("shows the example's code and settings as they are", async () => {
    const doc = await readFile(join(REPO_ROOT, 'docs', 'integration.md'), 'utf8');
    const blocks = [...doc.matchAll(/```ts\n\/\/ (examples\/existing-app\/\S+)\n([\s\S]*?)```/g)];
    expect(blocks.length).toBeGreaterThanOrEqual(4);
    for (const [, path, code] of blocks) expect(await readFile(join(REPO_ROOT, path!), 'utf8'), path).toContain(code);
    const manifest = JSON.parse(await readFile(join(REPO_ROOT, 'examples', 'existing-app', 'package.json'), 'utf8'));
    const settings = doc.match(/```json\n([\s\S]*?)```/)?.[1];
    expect(JSON.parse(`{${settings}}`)).toEqual({ 'mikro-orm': manifest['mikro-orm'], 'mikro-orm-saga': manifest['mikro-orm-saga'] });
    expect(doc).toContain(`"mikro-orm": "${manifest.scripts['mikro-orm']}"`);
  });
});

// The example is a MikroORM 6 app: legacy decorators from @mikro-orm/core, folder-based discovery with the
// metadata cache, MikroORM 6's `esm.js` CLI entry and 6.6.16 in its package.json. On 7 each of those is another
// API (decorators from @mikro-orm/decorators, `discoverEntities`, the FileCacheAdapter from fs-utils, `cli.js`),
// so it runs on 6 only; test/packaging/package-v7.test.ts runs the tarball, its `mikro-orm-saga` bin and the 7 CLI in a
// MikroORM 7 app.
describe.runIf(LOADED_ORM_MAJOR === 6)('examples/existing-app (a MikroORM 6 app)', () => {
  beforeAll(async () => {
    await installPackedPackage(app);
    await cp(join(REPO_ROOT, 'examples', 'existing-app'), app, { recursive: true });
    await cp(join(REPO_ROOT, 'examples', 'existing-app'), shipped, { recursive: true });
    await symlink(join(app, 'node_modules'), join(shipped, 'node_modules'));
  }, 180_000);
  afterAll(async () => {
    await rm(app, { recursive: true, force: true });
    await rm(shipped, { recursive: true, force: true });
  });

  /** An empty database for `dialect` (the app's migrations build it), dropped afterwards. */
  function useEmptyDatabase(dialect: DialectName): () => EmptyDatabase {
    let db: EmptyDatabase | undefined;
    beforeAll(async () => {
      db = await createEmptyDatabase(dialect);
    });
    afterAll(() => db?.drop());
    return () => db!;
  }

  /** The migrations in `dir` newer than `before`, backticks and escaped quotes read as double quotes. */
  async function newMigration(dir: string, before: string[]): Promise<string> {
    const [created] = (await readdir(dir)).filter((file) => !before.includes(file));
    expect(created, 'migration:create wrote no file').toBeDefined();
    return (await readFile(join(dir, created!), 'utf8')).replaceAll('\\`', '"').replaceAll('`', '"');
  }

  // One database per dialect for the app from the tarball: its migrations run there, then its server.
  const databases = Object.fromEntries(APP_DIALECTS.map((dialect) => [dialect, useEmptyDatabase(dialect)]));

  for (const dialect of APP_DIALECTS) {
    describe(`examples/existing-app from the npm tarball (${dialect})`, () => {
      const database = databases[dialect]!;

      it('generates and runs its next migration with the MikroORM CLI, then a second migration:create finds nothing', async () => {
        const env = appEnv(database(), dialect);
        // The app is in production already: its own migration ran before it added the library.
        await mikroOrm(env, 'migration:up');
        const folder = join(app, 'src', 'migrations', dialect);
        const before = await readdir(folder);
        expect(await mikroOrm(env, 'migration:create')).toContain('successfully created');
        const migration = await newMigration(folder, before);
        expect(migration).toMatch(
          /create unique index "saga_timer_pending_name_uniq" on "saga_timer" \("saga_type", "saga_id", "name"\) where "dispatched_at" is null/,
        );
        for (const table of ['saga_timer', 'saga_outbox', 'saga_handled_message', 'saga_inbox', 'order_saga']) {
          expect(migration).toMatch(new RegExp(`create table "${table}"`));
        }
        expect(migration).toMatch(
          /create index "order_saga_completed_at_index" on "order_saga" \("created_at"\) where "completed_at" is null/,
        );
        expect(migration).not.toMatch(/"customer"/);

        await mikroOrm(env, 'migration:up');
        expect(await mikroOrm(env, 'migration:create')).toContain('No changes required');
        expect(await readdir(folder)).toHaveLength(before.length + 1);
        expect((await readdir(join(app, 'temp'))).length).toBeGreaterThan(0); // the metadata cache is on
      }, 120_000);
    });
  }

  // Built once, after both dialects' migrations were generated: tsc type-checks them with the rest of the app.
  describe('examples/existing-app built with tsc', () => {
    beforeAll(() => buildApp(app), 120_000);

    for (const dialect of APP_DIALECTS) {
      it(`serves HTTP with the dispatcher beside it: a saga starts, its timer fires, the outbox is published; SIGTERM exits 0 (${dialect})`, async () => {
        const database = databases[dialect]!;
        const server = startServer(appEnv(database(), dialect, { PORT: '0', PAYMENT_TIMEOUT_MS: '200', DISPATCH_POLL_MS: '50' }));
        try {
          const { port } = await server.next((line) => line.event === 'listening', 'listening');
          expect(await post(Number(port), '/customers', { id: 'c-1', name: 'Ada' })).toMatchObject({ status: 201 });
          const started = await post(Number(port), '/orders', { orderId: 'o-1', customerId: 'c-1' });
          expect(started).toMatchObject({ status: 202, body: { outcome: 'started', timersScheduled: 1, messagesSent: 1 } });

          const published = (type: string) => (line: AppLine) => line.event === 'published' && line.type === type;
          await expect(server.next(published('ConfirmOrder'), 'ConfirmOrder published')).resolves.toMatchObject({
            payload: { orderId: 'o-1' },
          });
          // 'payment-timeout' fired: the saga cancelled the order and sent OrderCancelled.
          await expect(server.next(published('OrderCancelled'), 'OrderCancelled published')).resolves.toMatchObject({
            payload: { orderId: 'o-1' },
          });
          expect(await post(Number(port), '/payments', { orderId: 'o-1' })).toMatchObject({ status: 202, body: { outcome: 'ignored' } });
          expect(await post(Number(port), '/orders', { orderId: 'o-2', customerId: 'c-1' })).toMatchObject({ status: 202 });
          const paid = await post(Number(port), '/payments', { orderId: 'o-2' });
          expect(paid).toMatchObject({ status: 202, body: { outcome: 'handled', completed: true, timersCancelled: 1 } });
          await expect(server.next(published('ShipOrder'), 'ShipOrder published')).resolves.toMatchObject({ payload: { orderId: 'o-2' } });
          await expectOperatorCli(appEnv(database(), dialect));
        } finally {
          server.child.kill('SIGTERM');
        }
        expect(await server.exited).toBe(0);
        await expect(server.next((line) => line.event === 'stopped', 'stopped')).resolves.toBeDefined();
      }, 120_000);
    }
  });

  for (const dialect of APP_DIALECTS) {
    describe(`examples/existing-app with the library's shipped migrations beside its own (${dialect})`, () => {
      const database = useEmptyDatabase(dialect);

      it('runs them from its folder with its own; migration:create then writes only its saga table', async () => {
        const env = appEnv(database(), dialect);
        const folder = join(shipped, 'src', 'migrations', dialect);
        // docs/integration.md: one file per library migration, named after it.
        for (const { name } of SAGA_MIGRATIONS[dialect]) {
          const source = `import { sagaMigration } from 'mikro-orm-saga/migrations';\n\nexport const ${name} = sagaMigration('${dialect}', '${name}');\n`;
          await writeFile(join(folder, `${name}.ts`), source);
        }
        expect(await mikroOrm(env, 'migration:up', shipped)).toContain(SAGA_MIGRATIONS[dialect].at(-1)!.name);
        const before = await readdir(folder);
        await mikroOrm(env, 'migration:create', shipped);
        const migration = await newMigration(folder, before);
        expect(migration).toMatch(/create table "order_saga"/);
        expect(migration).not.toMatch(/"saga_timer"|"saga_outbox"|"customer"/);
        // Every statement is the saga table's own: the shipped migrations left the library's tables as its entities
        // describe them. That order_saga then round-trips (up, then create finds nothing) the tarball app shows above.
        const statements = migration.split('\n').filter((line) => line.includes('addSql('));
        expect(statements.length).toBeGreaterThan(0);
        expect(statements.filter((line) => !line.includes('"order_saga"'))).toEqual([]);
      }, 120_000);
    });
  }
});
