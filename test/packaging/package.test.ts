// The published package: `npm pack` produces a tarball that installs into a separate MikroORM app,
// type-checks there against its .d.ts through the exports map, and works with any metadata provider.
import { randomUUID } from 'node:crypto';
import { cp, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOADED_ORM_MAJOR } from '../support/orm-leg.js';
import { appRunner, compileApp, installPackage, itWorksInTheApp } from '../support/package-install.js';
import { REPO_ROOT } from '../support/repository.js';

// Inside the repository, so the app resolves the peer dependencies (@mikro-orm/*) from the repository's
// node_modules: one copy of @mikro-orm/core, as in a real app.
const app = join(REPO_ROOT, '.tmp', `package-app-${randomUUID().slice(0, 8)}`);

// MikroORM 7 has its own app and test (test/packaging/package-v7.test.ts): this app uses 6's decorators.
describe.runIf(LOADED_ORM_MAJOR === 6)('the npm tarball in a separate MikroORM app', () => {
  beforeAll(async () => {
    await installPackage(app);
    await cp(join(REPO_ROOT, 'test', 'fixtures', 'package-app'), app, { recursive: true });
    await compileApp(app);
  }, 180_000);
  afterAll(() => rm(app, { recursive: true, force: true }));

  it('ships built ESM and .d.ts only, with the exports map pointing at them, and the files the README links to', async () => {
    const pkg = join(app, 'node_modules', 'mikro-orm-saga');
    const manifest = JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8'));
    for (const entry of Object.values(manifest.exports as Record<string, { import?: string; types?: string } | string>)) {
      if (typeof entry === 'string') continue;
      await expect(readdir(join(pkg, entry.import!, '..'))).resolves.toContain(entry.import!.split('/').pop());
      await expect(readdir(join(pkg, entry.types!, '..'))).resolves.toContain(entry.types!.split('/').pop());
    }
    const files = await readdir(pkg, { recursive: true });
    expect(files.some((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toBe(false);
    expect(files.some((f) => f.startsWith('test') || f.startsWith('examples') || f.startsWith('bench'))).toBe(false);
    expect(files).toEqual(expect.arrayContaining(['README.md', 'CHANGELOG.md', 'LICENSE']));
    const readme = (await readFile(join(pkg, 'README.md'), 'utf8')).replace(/```[\s\S]*?```/g, '');
    const linked = [...readme.matchAll(/\]\(([^)#\s:]+)(?:#[^)]*)?\)/g)].map(([, path]) => path!);
    expect(linked.length).toBeGreaterThan(5);
    expect(linked.filter((path) => !files.includes(path))).toEqual([]);
  });

  const runApp = appRunner(app);

  const expectWorks = (result: Record<string, unknown>) => {
    expect(result.started).toMatchObject({ outcome: 'started', version: 0, timersScheduled: 1, messagesSent: 1 });
    expect(result.paid).toMatchObject({ outcome: 'handled', version: 1, completed: true, timersCancelled: 1 });
    expect(result.timers).toBe(0);
    expect(result.libraryDiff).toBe('');
    expect(result.missingLibraryMigrations).toEqual([]);
    // mikro-orm-saga/operations through the tarball's exports map.
    expect(result.listed).toEqual([{ correlation: 'c-1', completed: true }]);
    expect(result.schemaProblems).toEqual([]);
    expect(String(result.activeIndex).replaceAll('"', '').replaceAll('`', '').toLowerCase()).toMatch(
      /\(created_at\) where \(?completed_at is null\)?/,
    );
  };

  itWorksInTheApp(runApp, expectWorks, 'reflect');

  // `@mikro-orm/better-sqlite` exists for MikroORM 6 only (docs/integration.md "Which SQLite driver").
  it('works on SQLite through @mikro-orm/better-sqlite (better-sqlite3)', async () => {
    const result = await runApp('better-sqlite', 'reflect', 'better.sqlite');
    expectWorks(result);
    expect(result.platform).toBe('BetterSqlitePlatform');
  });
});
