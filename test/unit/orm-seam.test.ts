// The compatibility seam (src/orm) is the only place that knows MikroORM comes in two majors: the rest of the
// library neither reads the version nor imports a package only one major has. Which module may import which
// (src/orm through its index only, no SQL-layer package) is checked by dependency-cruiser in `npm run lint`
// (.dependency-cruiser.cjs); these tests check what an import rule cannot see.
import { readdir, readFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import * as core from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { indexExpression } from '../../src/orm/index.js';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'src');

/** MikroORM's exception classes (everything `@mikro-orm/core` exports that extends Error). */
const ORM_ERROR_CLASSES = Object.entries(core)
  .filter(([, value]) => typeof value === 'function' && value.prototype instanceof Error)
  .map(([name]) => name);

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = (await readdir(dir, { withFileTypes: true })).filter((e) => e.name !== 'node_modules' && e.name !== 'results');
  const nested = await Promise.all(
    entries.map((e) =>
      e.isDirectory() ? sourceFiles(join(dir, e.name)) : Promise.resolve(e.name.endsWith('.ts') ? [join(dir, e.name)] : []),
    ),
  );
  return nested.flat();
}

describe('the MikroORM compatibility seam', () => {
  it('no file of the library outside src/orm checks the MikroORM version', async () => {
    const offenders: string[] = [];
    for (const file of await sourceFiles(src)) {
      const path = relative(src, file);
      if (path.startsWith('orm/')) continue;
      const text = await readFile(file, 'utf8');
      if (/getORMVersion|ORM_MAJOR/.test(text)) offenders.push(path);
    }
    expect(offenders).toEqual([]);
  });

  it('src/orm/index.ts exports only what the rest of the library uses', async () => {
    const used = new Set<string>();
    for (const file of await sourceFiles(src)) {
      if (relative(src, file).startsWith('orm/')) continue;
      const text = await readFile(file, 'utf8');
      for (const [, names] of text.matchAll(/(?:import|export)\s*(?:type\s*)?\{([^}]*)\}\s*from\s*'(?:\.\.?\/)+orm\/index\.js'/g)) {
        for (const name of names!.split(',')) used.add(name.replace(/^\s*type\s+/, '').trim());
      }
    }
    const index = await readFile(join(src, 'orm', 'index.ts'), 'utf8');
    const exported = [...index.matchAll(/export\s*\{([^}]*)\}/g)].flatMap(([, names]) =>
      names!
        .split(',')
        .map((name) => name.replace(/^\s*type\s+/, '').trim())
        .filter(Boolean),
    );
    expect(exported.length).toBeGreaterThan(0);
    expect(exported.filter((name) => !used.has(name))).toEqual([]);
  });

  it('no file of the library outside src/orm reads MikroORM metadata or tests for its exception classes itself', async () => {
    expect(ORM_ERROR_CLASSES).toEqual(
      expect.arrayContaining(['UniqueConstraintViolationException', 'DriverException', 'OptimisticLockError']),
    );
    const instanceOf = new RegExp(`instanceof (${ORM_ERROR_CLASSES.join('|')})\\b`);
    const offenders: string[] = [];
    for (const file of await sourceFiles(src)) {
      const path = relative(src, file);
      if (path.startsWith('orm/')) continue;
      const text = await readFile(file, 'utf8');
      if (/\.getMetadata\(\)/.test(text) || instanceOf.test(text)) offenders.push(path);
    }
    expect(offenders).toEqual([]);
  });

  it('no library, bench, example or test code calls the schema generator or migrator methods 7 removed', async () => {
    const offenders: string[] = [];
    for (const dir of ['src', 'bench', 'examples', 'test']) {
      for (const file of await sourceFiles(join(root, dir))) {
        if (file === import.meta.filename) continue;
        if (/\.(getMigrator|getSchemaGenerator)\(\)/.test(await readFile(file, 'utf8'))) offenders.push(relative(root, file));
      }
    }
    expect(offenders).toEqual([]);
  });

  it('an index expression gets (table, columns, name) whichever order MikroORM passes them in', () => {
    const expression = indexExpression<'createdAt' | 'completedAt'>(
      (table, columns, name) => `create index "${name}" on "${table.name}" ("${columns.createdAt}") where "${columns.completedAt}" is null`,
    ) as unknown as (a: unknown, b: unknown, name: string) => string;
    const table = { name: 'order_saga', schema: undefined, toString: () => 'order_saga' };
    // Even a saga with a property called `name` (whose column is a string) is not mistaken for the table.
    const columns = { createdAt: 'created_at', completedAt: 'completed_at', name: 'name' };
    const sql = 'create index "ix" on "order_saga" ("created_at") where "completed_at" is null';
    expect(expression(table, columns, 'ix')).toBe(sql); // MikroORM 6
    expect(expression(columns, table, 'ix')).toBe(sql); // MikroORM 7
  });
});
