// An app's saga state entity may be mapped with MikroORM 6's decorators, 7's legacy or ES decorators, or
// `defineEntity` (README "Register in your app"). Each style runs on the major that has it; the decorator
// fixtures are imported dynamically so a major never loads a decorators package it does not ship.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { transformWithOxc } from 'vite';
import { describe, expect, it } from 'vitest';
import { SagaRuntime, SagaState } from '../../src/index.js';
import { ORM_MAJOR } from '../../src/orm/orm-major.js';
import { updateSchemaSql } from '../../src/orm/schema-tools.js';
import { type StyledSagaState, styledSaga } from '../fixtures/entity-style-saga.js';
import { createTestDatabase, DIALECTS } from '../support/databases.js';
import { lowerEsDecorators } from '../support/lower-es-decorators.js';
import { uniqueKey } from '../support/suite.js';

/** Every style maps the README's `OrderSaga`, whose table MikroORM names after the class. */
const TABLE = 'order_saga';

interface Style {
  readonly name: string;
  readonly major: 6 | 7 | 'both';
  load(): Promise<{ state: new () => StyledSagaState; saga: ReturnType<typeof styledSaga<StyledSagaState>> }>;
}

/**
 * Imports a MikroORM-7-only fixture. The path is not a literal, so the main tsconfig (6's types, no
 * @mikro-orm/decorators) does not follow it; legs/mikro-orm-7/tsconfig*.json typecheck those files.
 */
// biome-ignore lint/suspicious/noExplicitAny: the fixture's types are checked against 7's types, not here.
const importV7Fixture = (file: string): Promise<any> => import(`../fixtures/v7/${file}`);

const STYLES: readonly Style[] = [
  {
    name: 'defineEntity',
    major: 'both',
    load: async () => {
      const { OrderSaga } = await import('../docs/fixtures/order-saga.js');
      return { state: OrderSaga, saga: styledSaga(OrderSaga) };
    },
  },
  {
    name: "MikroORM 6's decorators",
    major: 6,
    load: async () => {
      const { OrderSaga, orderSaga } = await import('../fixtures/v6/decorators-saga.js');
      return { state: OrderSaga, saga: orderSaga };
    },
  },
  {
    name: "MikroORM 7's legacy decorators",
    major: 7,
    load: async () => {
      const { OrderSaga, orderSaga } = await importV7Fixture('legacy-decorators-saga.js');
      return { state: OrderSaga, saga: orderSaga };
    },
  },
  {
    name: "MikroORM 7's ES decorators",
    major: 7,
    load: async () => {
      const { OrderSaga, orderSaga } = await importV7Fixture('es-decorators-saga.js');
      return { state: OrderSaga, saga: orderSaga };
    },
  },
];

for (const dialect of DIALECTS) {
  describe(`app state entity styles (${dialect})`, () => {
    for (const style of STYLES) {
      it.runIf(style.major === 'both' || style.major === ORM_MAJOR)(
        `${style.name}: the entity extends SagaState, gets the partial index, and handles messages with versions`,
        async () => {
          const { state, saga } = await style.load();
          const db = await createTestDatabase(dialect, [state]);
          try {
            const meta = db.orm.getMetadata().find(state.name)!;
            expect(meta.tableName).toBe(TABLE);
            expect(meta.properties.version?.fieldNames).toEqual(['version']);
            expect(await updateSchemaSql(db.orm)).toBe('');

            const runtime = new SagaRuntime({ em: db.orm.em, sagas: [saga] });
            const orderId = uniqueKey('order');
            expect(await runtime.handle(saga, { type: 'OrderPlaced', orderId })).toMatchObject({ outcome: 'started', version: 0 });
            expect(await runtime.handle(saga, { type: 'StockReserved', orderId })).toMatchObject({ outcome: 'handled', version: 1 });
            const row = await db.orm.em.fork().findOneOrFail(state, { orderId } as never);
            expect(row).toBeInstanceOf(SagaState);
            expect(row).toMatchObject({ orderId, step: 'CapturingPayment', version: 1, completedAt: null });

            const indexes = await db.orm.em
              .fork()
              .getConnection()
              .execute<{ sql: string }[]>(
                dialect === 'postgresql'
                  ? `select indexdef as sql from pg_indexes where tablename = '${TABLE}'`
                  : `select sql from sqlite_master where type = 'index' and tbl_name = '${TABLE}' and sql is not null`,
              );
            expect(indexes.map((r: { sql: string }) => r.sql.replaceAll('"', '').replaceAll('`', '').toLowerCase())).toEqual(
              expect.arrayContaining([expect.stringMatching(/\(created_at\) where \(?completed_at is null\)?/)]),
            );
          } finally {
            await db.dispose();
          }
        },
      );
    }
  });
}

// An app's ES-decorated entities do not load under vitest 4 as they are ("SyntaxError: Invalid or unexpected
// token"): Vite 8 transforms TypeScript with Oxc, which lowers legacy decorators only. docs/integration.md shows the
// plugin the v7 leg runs its ES-decorator fixture through (test/support/lower-es-decorators.ts).
describe('ES decorators under vitest 4 (Vite 8)', () => {
  const fixture = join(import.meta.dirname, '..', 'fixtures', 'v7', 'es-decorators-saga.ts');
  // An app's tsconfig for ES decorators (this repository's own turns legacy decorators on).
  const appTsconfig = { tsconfig: { compilerOptions: { experimentalDecorators: false } } };

  /** Whether Node parses `code` as an ES module: `node --check` on a file of it; the SyntaxError when not. */
  async function nodeParses(code: string): Promise<true | string> {
    const dir = await mkdtemp(join(tmpdir(), 'es-decorators-'));
    try {
      await writeFile(join(dir, 'module.mjs'), code);
      await promisify(execFile)(process.execPath, ['--check', join(dir, 'module.mjs')]);
      return true;
    } catch (error) {
      return String((error as { stderr?: string }).stderr);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it("Vite's Oxc transform leaves them in and Node cannot parse the module; the documented plugin lowers them first", async () => {
    const source = await readFile(fixture, 'utf8');
    const plain = await transformWithOxc(source, fixture, appTsconfig);
    expect(plain.code).toContain('@Entity()');
    expect(await nodeParses(plain.code)).toMatch(/SyntaxError/);

    const plugin = lowerEsDecorators(/es-decorators-saga\.ts$/);
    const transform = plugin.transform as (code: string, id: string) => { code: string } | null;
    const lowered = transform.call({}, source, fixture)!;
    const withPlugin = await transformWithOxc(lowered.code, fixture, appTsconfig);
    expect(withPlugin.code).not.toContain('@Entity()');
    expect(await nodeParses(withPlugin.code)).toBe(true);
  });
});
