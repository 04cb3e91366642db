// The write phase updates a loaded saga row with one UPDATE of its own, built from MikroORM's change set
// (src/orm/plain-update.ts plainRowUpdate, src/sql/saga-statements.ts updateSagaRow), instead of MikroORM's flush:
// the stored row must be exactly what the flush writes, for every plain column type. MikroORM's flush still
// writes the row when a hook or subscriber listens to the flush, or when a changed column needs MikroORM's own
// handling (JSON here).
import { DecimalType, defineEntity, type EventArgs, type EventSubscriber, type FlushEventArgs } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { plainRowUpdate } from '../../../src/orm/index.js';
import { LabelListType } from '../../fixtures/label-list-type.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** One property of each plain column type the direct UPDATE writes, and a JSON one it leaves to MikroORM. */
class WideSaga extends SagaState {
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

const WideSagaSchema = defineEntity({
  class: WideSaga,
  extends: SagaStateSchema,
  tableName: 'wide_saga',
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

/** The same columns, with an entity hook on update: MikroORM's flush must write it and run the hook. */
const hookCalls: string[] = [];
class HookedSaga extends SagaState {
  key!: string;
  count: number = 0;
}

const HookedSagaSchema = defineEntity({
  class: HookedSaga,
  extends: SagaStateSchema,
  tableName: 'hooked_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
  hooks: {
    afterUpdate: [(args: EventArgs<HookedSaga>) => void hookCalls.push(`afterUpdate ${args.entity.count}`)],
  },
});

/** A saga whose flushes a subscriber of its own watches. */
class WatchedSaga extends SagaState {
  key!: string;
  count: number = 0;
}

const WatchedSagaSchema = defineEntity({
  class: WatchedSaga,
  extends: SagaStateSchema,
  tableName: 'watched_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

class WatchUpdates implements EventSubscriber<WatchedSaga> {
  readonly updated: number[] = [];
  getSubscribedEntities() {
    return [WatchedSaga];
  }
  async afterUpdate(args: EventArgs<WatchedSaga>): Promise<void> {
    this.updated.push(args.entity.count);
  }
}

interface Changes {
  readonly note: string | null;
  readonly count: number;
  readonly ratio: number;
  readonly flag: boolean;
  readonly amount: number;
  readonly big: string;
  readonly dueOn: Date | null;
  readonly labels: string[];
}

type WideMessage =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Change'; readonly key: string; readonly changes: Changes }
  | { readonly type: 'Tag'; readonly key: string; readonly tag: string };

const wideSaga = defineSaga<WideSaga, WideMessage>({
  name: 'wide',
  state: WideSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Change: (m) => m.key, Tag: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Change(saga, { changes }) {
      applyChanges(saga, changes);
    },
    Tag(saga, message) {
      saga.data = { tags: [...saga.data.tags, message.tag] };
    },
  },
});

type CountMessage = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string };
const counting = <S extends SagaState & { count: number }>(name: string, state: new () => S) =>
  defineSaga<S, CountMessage>({
    name,
    state,
    correlation: { property: 'key' as never, from: { Start: (m) => m.key, Inc: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start() {},
      Inc(saga) {
        saga.count++;
      },
    },
  });
const hookedSaga = counting('hooked', HookedSaga);
const watchedSaga = counting('watched', WatchedSaga);

/** The changes as state values: the bigint travels as text in the (JSON) message. */
function applyChanges(saga: WideSaga, changes: Changes): void {
  Object.assign(saga, { ...changes, big: BigInt(changes.big) });
}

const CHANGES: Changes = {
  note: 'it\'s "quoted" \\ and ünïcode',
  count: -42,
  ratio: 0.125,
  flag: true,
  amount: 1234.5,
  big: '9007199254740991',
  dueOn: new Date('2026-12-24T18:30:15.250Z'),
  labels: ['a', 'b'],
};

for (const dialect of DIALECTS) {
  describe(`the write phase's own UPDATE of a saga row (${dialect})`, () => {
    const db = useDatabase(dialect, [WideSagaSchema, HookedSagaSchema, WatchedSagaSchema]);
    const rowOf = async (key: string) => {
      const [row] = await db().orm.em.fork().getConnection().execute(`select * from wide_saga where key = ?`, [key]);
      const { id: _id, key: _key, created_at: _c, updated_at: _u, ...rest } = row as Record<string, unknown>;
      return rest;
    };

    it("writes every plain column type exactly as MikroORM's flush writes it", async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga] });
      const ours = uniqueKey('ours');
      const flushed = uniqueKey('flushed');
      await runtime.handle(wideSaga, { type: 'Start', key: ours });
      await runtime.handle(wideSaga, { type: 'Start', key: flushed });

      // The same change through the runtime, and through MikroORM's own flush of a loaded entity.
      expect(await runtime.handle(wideSaga, { type: 'Change', key: ours, changes: CHANGES })).toMatchObject({
        outcome: 'handled',
        version: 1,
      });
      const em = db().orm.em.fork();
      const reference = await em.findOneOrFail(WideSaga, { key: flushed });
      applyChanges(reference, CHANGES);
      reference.version = 1;
      await em.flush();

      expect(await rowOf(ours)).toEqual(await rowOf(flushed));
      const read = await db().orm.em.fork().findOneOrFail(WideSaga, { key: ours });
      expect({ ...read, id: undefined, key: undefined, createdAt: undefined, updatedAt: undefined }).toEqual({
        ...CHANGES,
        big: 9007199254740991n,
        id: undefined,
        key: undefined,
        createdAt: undefined,
        updatedAt: undefined,
        completedAt: null,
        version: 1,
        data: { tags: [] },
      });
    });

    it('takes that path for plain columns and leaves a JSON change to MikroORM, which writes it', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga] });
      const key = uniqueKey('json');
      await runtime.handle(wideSaga, { type: 'Start', key });
      const em = db().orm.em.fork();
      const saga = await em.findOneOrFail(WideSaga, { key });
      // What the runtime sets besides the step's changes: a new version and updatedAt.
      applyChanges(saga, CHANGES);
      Object.assign(saga, { version: 1, updatedAt: new Date() });
      const meta = em.getMetadata().find(WideSaga as never)!;
      const columns = plainRowUpdate(em, meta, saga);
      const names = ['note', 'count', 'ratio', 'flag', 'amount', 'big', 'due_on', 'labels', 'version', 'updated_at'];
      expect(columns?.map(({ column }) => column.replace(/[`"]/g, '')).sort()).toEqual(names.sort());
      saga.data = { tags: ['x'] };
      expect(plainRowUpdate(em, meta, saga)).toBeUndefined();

      expect(await runtime.handle(wideSaga, { type: 'Tag', key, tag: 'vip' })).toMatchObject({ outcome: 'handled', version: 1 });
      expect((await db().orm.em.fork().findOneOrFail(WideSaga, { key })).data).toEqual({ tags: ['vip'] });
    });

    it('a stale version still loses: the UPDATE is guarded by the version the unit read', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga] });
      const key = uniqueKey('stale');
      await runtime.handle(wideSaga, { type: 'Start', key });
      const em = db().orm.em.fork();
      const saga = await em.findOneOrFail(WideSaga, { key });
      const meta = em.getMetadata().find(WideSaga as never)!;
      saga.count = 1;
      // Another unit of work commits version 1 first.
      await runtime.handle(wideSaga, { type: 'Change', key, changes: { ...CHANGES, count: 2 } });
      const { updateSagaRow } = await import('../../../src/sql/saga-statements.js');
      const { runStatement } = await import('../../../src/sql/sql-executor.js');
      const change = { sagaId: saga.id, loadedVersion: 0, columns: plainRowUpdate(em, meta, saga)! };
      expect(await runStatement(em, updateSagaRow(runtime.context, meta, change))).toBe(0);
      expect((await db().orm.em.fork().findOneOrFail(WideSaga, { key })).count).toBe(2);
    });

    it("MikroORM's flush writes a saga whose entity has an update hook, and the hook runs", async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [hookedSaga] });
      const key = uniqueKey('hooked');
      await runtime.handle(hookedSaga, { type: 'Start', key });
      hookCalls.length = 0;
      expect(await runtime.handle(hookedSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(hookCalls).toEqual(['afterUpdate 1']);
      expect((await db().orm.em.fork().findOneOrFail(HookedSaga, { key })).count).toBe(1);
    });

    it("MikroORM's flush writes a saga an update subscriber watches, and the subscriber runs", async () => {
      const watcher = new WatchUpdates();
      db().orm.em.getEventManager().registerSubscriber(watcher);
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [watchedSaga] });
      const key = uniqueKey('watched');
      await runtime.handle(watchedSaga, { type: 'Start', key });
      expect(await runtime.handle(watchedSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(watchedSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 2 });
      expect(watcher.updated).toEqual([1, 2]);
    });

    it('a flush subscriber of any entity keeps every saga on MikroORM’s flush', async () => {
      const em = db().orm.em.fork({ freshEventManager: true });
      const flushes: string[] = [];
      em.getEventManager().registerSubscriber({ onFlush: async (_args: FlushEventArgs) => void flushes.push('onFlush') });
      const runtime = new SagaRuntime({ em, sagas: [wideSaga] });
      const key = uniqueKey('flushsub');
      await runtime.handle(wideSaga, { type: 'Start', key });
      flushes.length = 0;
      expect(await runtime.handle(wideSaga, { type: 'Change', key, changes: CHANGES })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(flushes.length).toBeGreaterThan(0);
      expect(await rowOf(key)).toMatchObject({ count: -42 });
    });
  });
}
