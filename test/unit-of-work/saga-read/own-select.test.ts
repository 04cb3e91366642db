// A unit of work reads its saga's row with a SELECT of its own, built once per saga type (src/orm/direct-reads.ts
// rowReadSql, readRowBy), instead of em.findOne's QueryBuilder on every message: the managed entity must be exactly
// what em.findOne gives, for every plain column type, and every mapping that SELECT would not read as em.findOne
// does (a formula, a lazy property, an embeddable, a relation, a type read through SQL) keeps em.findOne.
import { DecimalType, defineEntity, type EntityManager, type Platform, Type } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { hydrateRow, readRowBy, rowReadSql } from '../../../src/orm/index.js';
import { LabelListType } from '../../fixtures/label-list-type.js';
import { DIALECTS } from '../../support/databases.js';
import { managedState, metaOf } from '../../support/managed-entity.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** Text read through SQL of its own (`lower(...)`): only em.findOne's SELECT applies it. */
class LowerTextType extends Type<string, string> {
  override convertToJSValueSQL(key: string, _platform: Platform): string {
    return `lower(${key})`;
  }
  override getColumnType(): string {
    return 'varchar(60)';
  }
}

class WideReadSaga extends SagaState {
  key!: string;
  note: string | null = null;
  count: number = 0;
  ratio: number = 0;
  flag: boolean = false;
  amount: number = 0;
  big: bigint = 0n;
  dueOn: Date | null = null;
  labels: string[] = [];
  data: { tags: string[] } = { tags: [] };
}

const WideReadSagaSchema = defineEntity({
  class: WideReadSaga,
  extends: SagaStateSchema,
  tableName: 'wide_read_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    note: { type: 'text', fieldName: 'note', nullable: true },
    count: { type: 'integer', fieldName: 'count' },
    ratio: { type: 'double', fieldName: 'ratio' },
    flag: { type: 'boolean', fieldName: 'flag' },
    amount: { type: new DecimalType('number'), precision: 10, scale: 2, fieldName: 'amount' },
    big: { type: 'bigint', fieldName: 'big' },
    dueOn: { type: 'datetime', fieldName: 'due_on', nullable: true },
    labels: { type: LabelListType, fieldName: 'labels' },
    data: { type: 'json', fieldName: 'data' },
  },
});

/** A saga correlated by a bigint: the value bound for the read is converted as MikroORM converts a condition's. */
class NumberedReadSaga extends SagaState {
  serial!: bigint;
  count: number = 0;
}

const NumberedReadSagaSchema = defineEntity({
  class: NumberedReadSaga,
  extends: SagaStateSchema,
  tableName: 'numbered_read_saga',
  properties: {
    serial: { type: 'bigint', fieldName: 'serial', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

/** One mapping each that the saga's own SELECT would not read as em.findOne does. */
class FormulaReadSaga extends SagaState {
  key!: string;
  count: number = 0;
  doubled?: number;
  seen: number = -1;
}

const FormulaReadSagaSchema = defineEntity({
  class: FormulaReadSaga,
  extends: SagaStateSchema,
  tableName: 'formula_read_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    doubled: { type: 'integer', formula: (alias: string) => `${alias}.count * 2`, persist: false, nullable: true },
    seen: { type: 'integer', fieldName: 'seen' },
  },
});

class LazyReadSaga extends SagaState {
  key!: string;
  secret: string | null = null;
}

const LazyReadSagaSchema = defineEntity({
  class: LazyReadSaga,
  extends: SagaStateSchema,
  tableName: 'lazy_read_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    secret: { type: 'text', fieldName: 'secret', nullable: true, lazy: true },
  },
});

class LowerReadSaga extends SagaState {
  key!: string;
  name: string = '';
}

const LowerReadSagaSchema = defineEntity({
  class: LowerReadSaga,
  extends: SagaStateSchema,
  tableName: 'lower_read_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    name: { type: LowerTextType, fieldName: 'name' },
  },
});

type WideMessage = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Set'; readonly key: string };

const CHANGES = {
  note: 'it\'s "quoted" \\ and ünïcode',
  count: -42,
  ratio: 0.125,
  flag: true,
  amount: 1234.5,
  big: 9007199254740991n,
  dueOn: new Date('2026-12-24T18:30:15.250Z'),
  labels: ['a', 'b'],
  data: { tags: ['x', 'y'] },
};

const wideSaga = defineSaga<WideReadSaga, WideMessage>({
  name: 'wide-read',
  state: WideReadSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Set: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Set(saga) {
      Object.assign(saga, CHANGES);
    },
  },
});

const numberedSaga = defineSaga<
  NumberedReadSaga,
  { readonly type: 'Start'; readonly serial: string } | { readonly type: 'Inc'; readonly serial: string }
>({
  name: 'numbered-read',
  state: NumberedReadSaga,
  correlation: { property: 'serial', from: { Start: (m) => BigInt(m.serial), Inc: (m) => BigInt(m.serial) } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
    },
  },
});

/** Each step records the formula's value as the step saw it: em.findOne computes it, a plain SELECT * would not. */
const formulaSaga = defineSaga<
  FormulaReadSaga,
  { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string }
>({
  name: 'formula-read',
  state: FormulaReadSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.seen = saga.doubled ?? -1;
      saga.count++;
    },
  },
});

const lowerSaga = defineSaga<
  LowerReadSaga,
  { readonly type: 'Start'; readonly key: string } | { readonly type: 'Copy'; readonly key: string }
>({
  name: 'lower-read',
  state: LowerReadSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Copy: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Copy(saga) {
      // Reading the value as loaded, then writing it back: stays lower case only when it was read through lower().
      saga.name = `${saga.name}!`;
    },
  },
});

/** The saga read as a unit of work reads it, on a fresh fork: `property = value` through rowReadSql. */
async function readDirectly<T extends object>(em: EntityManager, entity: object, property: string, value: unknown): Promise<T | null> {
  const fork = em.fork();
  const meta = metaOf(fork, entity);
  const sql = rowReadSql(fork, meta, property);
  expect(sql).toBeDefined();
  const row = await readRowBy(fork, meta, sql!, property, value);
  return row ? hydrateRow<T>(fork, meta, row) : null;
}

for (const dialect of DIALECTS) {
  describe(`the unit of work's own read of a saga row (${dialect})`, () => {
    const db = useDatabase(dialect, [
      WideReadSagaSchema,
      NumberedReadSagaSchema,
      FormulaReadSagaSchema,
      LazyReadSagaSchema,
      LowerReadSagaSchema,
    ]);

    it('hydrates exactly what em.findOne hydrates, by correlation value and by id, for every plain column type', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga] });
      const key = uniqueKey('wide');
      const { sagaId } = await runtime.handle(wideSaga, { type: 'Start', key });
      expect(await runtime.handle(wideSaga, { type: 'Set', key })).toMatchObject({ outcome: 'handled', version: 1 });

      const byKey = await readDirectly<WideReadSaga>(db().orm.em, WideReadSaga, 'key', key);
      const byId = await readDirectly<WideReadSaga>(db().orm.em, WideReadSaga, 'id', sagaId);
      const found = await db().orm.em.fork().findOneOrFail(WideReadSaga, { key });
      expect(byKey).toBeInstanceOf(WideReadSaga);
      expect(managedState(byKey!)).toEqual(managedState(found));
      expect(managedState(byId!)).toEqual(managedState(found));
      expect(byKey).toMatchObject({ ...CHANGES, version: 1, completedAt: null });
      expect(await readDirectly(db().orm.em, WideReadSaga, 'key', uniqueKey('absent'))).toBeNull();
    });

    it('a value that looks like SQL or a placeholder is only a value', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga] });
      const key = uniqueKey("x' or '1'='1 ? $1");
      await runtime.handle(wideSaga, { type: 'Start', key });
      expect(await readDirectly<WideReadSaga>(db().orm.em, WideReadSaga, 'key', key)).toMatchObject({ key, version: 0 });
      expect(await readDirectly(db().orm.em, WideReadSaga, 'key', "' or '1'='1")).toBeNull();
    });

    it('a bigint correlation value finds its saga (the value converted as em.findOne converts it)', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [numberedSaga] });
      const serial = String(9_007_199_254_740_000n + BigInt(Math.floor(Math.random() * 900)));
      await runtime.handle(numberedSaga, { type: 'Start', serial });
      expect(await runtime.handle(numberedSaga, { type: 'Inc', serial })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(numberedSaga, { type: 'Inc', serial })).toMatchObject({ outcome: 'handled', version: 2 });
      const found = await db()
        .orm.em.fork()
        .findOneOrFail(NumberedReadSaga, { serial: BigInt(serial) });
      expect(managedState((await readDirectly(db().orm.em, NumberedReadSaga, 'serial', BigInt(serial)))!)).toEqual(managedState(found));
      expect(found.count).toBe(2);
    });

    it('a formula, a lazy property or a type read through SQL keeps em.findOne, and the step sees what it reads', async () => {
      const em = db().orm.em;
      for (const entity of [FormulaReadSaga, LazyReadSaga, LowerReadSaga]) {
        expect(rowReadSql(em, metaOf(em, entity), 'key'), entity.name).toBeUndefined();
      }
      const runtime = new SagaRuntime({ em, sagas: [formulaSaga, lowerSaga] });
      const key = uniqueKey('formula');
      await runtime.handle(formulaSaga, { type: 'Start', key });
      await runtime.handle(formulaSaga, { type: 'Inc', key });
      await runtime.handle(formulaSaga, { type: 'Inc', key });
      // The second step saw count 1 doubled: the formula was read.
      expect(await em.fork().findOneOrFail(FormulaReadSaga, { key })).toMatchObject({ count: 2, seen: 2 });

      const lower = uniqueKey('lower');
      await runtime.handle(lowerSaga, { type: 'Start', key: lower });
      await em.fork().nativeUpdate(LowerReadSaga, { key: lower }, { name: 'MiXeD' });
      await runtime.handle(lowerSaga, { type: 'Copy', key: lower });
      const [row] = await em.fork().getConnection().execute('select name from lower_read_saga where key = ?', [lower]);
      expect((row as { name: string }).name).toBe('mixed!');
    });
  });
}
