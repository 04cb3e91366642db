// The published package: `npm pack` produces a tarball that installs into a separate MikroORM app,
// type-checks there against its .d.ts through the exports map, and works with any metadata provider.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { adminQuery, withDatabase } from './support/postgres-server.js';

const run = promisify(execFile);
const root = resolve(import.meta.dirname, '..');
// Inside the repository, so the app resolves the peer dependencies (@mikro-orm/*) from the repository's
// node_modules: one copy of @mikro-orm/core, as in a real app.
const app = join(root, '.tmp', `package-app-${randomUUID().slice(0, 8)}`);

describe('the npm tarball in a separate MikroORM app', () => {
  beforeAll(async () => {
    await mkdir(app, { recursive: true });
    await run('npm', ['pack', '--pack-destination', app], { cwd: root });
    const tarball = (await readdir(app)).find((f) => f.endsWith('.tgz'));
    await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'saga-consumer', private: true, type: 'module' }));
    await run('npm', ['install', '--no-save', '--legacy-peer-deps', '--offline', '--no-audit', '--no-fund', `./${tarball}`], { cwd: app });
    await cp(join(root, 'test', 'package-app', 'app.ts'), join(app, 'app.ts'));
    await cp(join(root, 'test', 'package-app', 'tsconfig.json'), join(app, 'tsconfig.json'));
    await run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: app });
  }, 180_000);
  afterAll(() => rm(app, { recursive: true, force: true }));

  it('ships built ESM and .d.ts only, with the exports map pointing at them', async () => {
    const pkg = join(app, 'node_modules', 'mikro-orm-saga');
    const manifest = JSON.parse(await (await import('node:fs/promises')).readFile(join(pkg, 'package.json'), 'utf8'));
    for (const entry of Object.values(manifest.exports as Record<string, { import?: string; types?: string } | string>)) {
      if (typeof entry === 'string') continue;
      await expect(readdir(join(pkg, entry.import!, '..'))).resolves.toContain(entry.import!.split('/').pop());
      await expect(readdir(join(pkg, entry.types!, '..'))).resolves.toContain(entry.types!.split('/').pop());
    }
    const files = await readdir(pkg, { recursive: true });
    expect(files.some((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toBe(false);
    expect(files.some((f) => f.startsWith('test') || f.startsWith('examples') || f.startsWith('bench'))).toBe(false);
  });

  const expectWorks = (stdout: string) => {
    const result = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(result.started).toMatchObject({ outcome: 'started', version: 0, timersScheduled: 1, messagesSent: 1 });
    expect(result.paid).toMatchObject({ outcome: 'handled', version: 1, completed: true, timersCancelled: 1 });
    expect(result.timers).toBe(0);
    expect(result.libraryDiff).toBe('');
  };

  it('works on SQLite with the default metadata provider', async () => {
    const { stdout } = await run(process.execPath, ['dist/app.js', 'sqlite', 'reflect', 'reflect.sqlite'], { cwd: app });
    expectWorks(stdout);
  });

  it('works on SQLite with the ts-morph metadata provider', async () => {
    const { stdout } = await run(process.execPath, ['dist/app.js', 'sqlite', 'ts-morph', 'morph.sqlite'], { cwd: app });
    expectWorks(stdout);
  });

  it('works on PostgreSQL', async () => {
    const server = inject('postgresUrl');
    const name = `saga_pkg_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    await adminQuery(server, `create database "${name}"`);
    try {
      const { stdout } = await run(process.execPath, ['dist/app.js', 'postgresql', 'reflect', withDatabase(server, name)], { cwd: app });
      expectWorks(stdout);
    } finally {
      await adminQuery(server, `drop database if exists "${name}" with (force)`);
    }
  });
});
