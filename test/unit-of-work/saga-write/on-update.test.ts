// A property's `onUpdate` callback (on the state or on an embeddable it embeds) runs once per unit of work that
// changes the row, as in a plain MikroORM flush (docs/guarantees.md): the step phase computes the change set to see
// what changed with the callbacks taken off the metadata, so only the flush calls them. An entity with an `onUpdate`
// property is left to MikroORM's flush (not the write phase's own UPDATE), which would compute its change set again.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, SagaTimer, silentLogger } from '../../../src/index.js';
import { computeChangeSetsOnce, plainRowUpdate } from '../../../src/orm/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** How many times each saga's `revision` onUpdate callback was called, by saga key. */
const calls = new Map<string, number>();

class Stamp {
  edits: number = 0;
}

const StampSchema = defineEntity({
  class: Stamp,
  embeddable: true,
  properties: { edits: { type: 'integer', onUpdate: (stamp: Stamp) => stamp.edits + 1 } },
});

/** A revision counter bumped by onUpdate (which also counts its calls), an embeddable, and a nullable one. */
class CountedSaga extends SagaState {
  key!: string;
  count: number = 0;
  revision: number = 0;
  stamp: Stamp = new Stamp();
  extra: Stamp | null = null;
}

const CountedSagaSchema = defineEntity({
  class: CountedSaga,
  extends: SagaStateSchema,
  tableName: 'counted_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    revision: {
      type: 'integer',
      fieldName: 'revision',
      onUpdate: (saga: CountedSaga) => {
        calls.set(saga.key, (calls.get(saga.key) ?? 0) + 1);
        return saga.revision + 1;
      },
    },
    stamp: { kind: 'embedded', entity: () => Stamp },
    extra: { kind: 'embedded', entity: () => Stamp, nullable: true },
  },
});

type CountedMessage =
  | { readonly type: 'Start'; readonly key: string; readonly timer?: boolean }
  | { readonly type: 'Inc'; readonly key: string }
  | { readonly type: 'Nothing'; readonly key: string }
  | { readonly type: 'Schedule'; readonly key: string }
  | { readonly type: 'Tick'; readonly key: string }
  | { readonly type: 'SetRevision'; readonly key: string; readonly revision: number }
  | { readonly type: 'NewStamp'; readonly key: string }
  | { readonly type: 'Extra'; readonly key: string; readonly on: boolean };

const byKey = (m: { readonly key: string }) => m.key;

const countedSaga = defineSaga<CountedSaga, CountedMessage>({
  name: 'counted',
  state: CountedSaga,
  correlation: {
    property: 'key',
    from: { Start: byKey, Inc: byKey, Nothing: byKey, Schedule: byKey, Tick: byKey, SetRevision: byKey, NewStamp: byKey, Extra: byKey },
  },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
    },
    Nothing() {},
    Schedule(saga, _message, ctx) {
      ctx.schedule('tick', 1_000, { type: 'Tick', key: saga.key });
    },
    Tick(saga) {
      saga.count++;
    },
    SetRevision(saga, message) {
      saga.revision = message.revision;
    },
    NewStamp(saga) {
      saga.stamp = Object.assign(new Stamp(), { edits: 10 });
    },
    Extra(saga, message) {
      saga.extra = message.on ? Object.assign(new Stamp(), { edits: 5 }) : null;
    },
  },
});

/** An onUpdate that changes its JSON value in place and returns it (an edit log appended on every update). */
class LoggedSaga extends SagaState {
  key!: string;
  count: number = 0;
  history: string[] = [];
}

const LoggedSagaSchema = defineEntity({
  class: LoggedSaga,
  extends: SagaStateSchema,
  tableName: 'logged_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    history: {
      type: 'json',
      fieldName: 'history',
      onUpdate: (saga: LoggedSaga) => {
        saga.history.push(`edit ${saga.count}`);
        return saga.history;
      },
    },
  },
});

type LoggedMessage = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string };

const loggedSaga = defineSaga<LoggedSaga, LoggedMessage>({
  name: 'logged',
  state: LoggedSaga,
  correlation: { property: 'key', from: { Start: byKey, Inc: byKey } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
    },
  },
});

/** An embeddable with a revision counter of its own, bumped the same way (MikroORM walks into embeddables). */
class Audit {
  edits: number = 0;
}

const AuditSchema = defineEntity({
  class: Audit,
  embeddable: true,
  properties: { edits: { type: 'integer', onUpdate: (audit: Audit) => audit.edits + 1 } },
});

/** A saga with a revision counter MikroORM bumps whenever it computes an update, and a JSON column. */
class RevisedSaga extends SagaState {
  key!: string;
  count: number = 0;
  revision: number = 0;
  data: { tags: string[] } = { tags: [] };
  audit: Audit = new Audit();
}

const RevisedSagaSchema = defineEntity({
  class: RevisedSaga,
  extends: SagaStateSchema,
  tableName: 'revised_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    revision: { type: 'integer', fieldName: 'revision', onUpdate: (saga: RevisedSaga) => saga.revision + 1 },
    data: { type: 'json', fieldName: 'data' },
    audit: { kind: 'embedded', entity: () => Audit },
  },
});

type Message =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Inc'; readonly key: string }
  | { readonly type: 'Tag'; readonly key: string; readonly tag: string };

const revisedSaga = defineSaga<RevisedSaga, Message>({
  name: 'revised',
  state: RevisedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key, Tag: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
    },
    Tag(saga, message) {
      saga.data = { tags: [...saga.data.tags, message.tag] };
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`onUpdate once per unit of work (${dialect})`, () => {
    const db = useDatabase(dialect, [CountedSagaSchema, StampSchema, LoggedSagaSchema, RevisedSagaSchema, AuditSchema]);
    const read = (key: string) => db().orm.em.fork().findOneOrFail(CountedSaga, { key });
    const readRevised = (key: string) => db().orm.em.fork().findOneOrFail(RevisedSaga, { key });
    const runtimeOf = (options: { groupCommit?: false; clock?: FakeClock } = {}) =>
      new SagaRuntime({ em: db().orm.em, sagas: [countedSaga, loggedSaga], ...options });
    const started = async (runtime: SagaRuntime, prefix: string) => {
      const key = uniqueKey(prefix);
      await runtime.handle(countedSaga, { type: 'Start', key });
      return key;
    };

    it('pins the baseline: a plain MikroORM flush calls onUpdate once and appends one history entry', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'plain');
      await runtime.handle(loggedSaga, { type: 'Start', key });
      const em = db().orm.em.fork();
      const counted = await em.findOneOrFail(CountedSaga, { key });
      const logged = await em.findOneOrFail(LoggedSaga, { key });
      calls.delete(key);
      // `version` is a concurrency-check column: MikroORM's flush wants it changed, as the runtime changes it.
      for (const saga of [counted, logged]) {
        saga.count++;
        saga.version++;
      }
      await em.flush();
      expect(calls.get(key)).toBe(1);
      expect((await db().orm.em.fork().findOneOrFail(LoggedSaga, { key })).history).toEqual(['edit 1']);
    });

    // A callback with an effect besides its return value (a counter, a sequence, an audit call, a query through its
    // `em` argument) sees one update per unit of work.
    it('calls a state property’s onUpdate callback once per unit of work that changes the row', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'calls');
      calls.delete(key);
      await runtime.handle(countedSaga, { type: 'Inc', key });
      expect((await read(key)).revision).toBe(1);
      expect(calls.get(key)).toBe(1);
    });

    // An onUpdate that changes its value in place and returns it (an edit log pushed to a JSON array).
    it('an onUpdate that appends to its JSON value in place appends once per unit of work', async () => {
      const runtime = runtimeOf();
      const key = uniqueKey('history');
      await runtime.handle(loggedSaga, { type: 'Start', key });
      await runtime.handle(loggedSaga, { type: 'Inc', key });
      const saga = await db().orm.em.fork().findOneOrFail(LoggedSaga, { key });
      expect(saga.history).toEqual(['edit 1']);
    });

    it('a step that changes nothing runs no onUpdate and writes nothing', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'nothing');
      calls.delete(key);
      const result = await runtime.handle(countedSaga, { type: 'Nothing', key });
      expect(result.changed).toBe(false);
      expect(calls.get(key)).toBeUndefined();
      const saga = await read(key);
      expect([saga.revision, saga.stamp.edits, saga.version]).toEqual([0, 0, 0]);
    });

    it('concurrent units on one saga (version conflicts retried): one revision per unit written', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'race');
      const n = 6;
      const results = await Promise.all(Array.from({ length: n }, () => runtime.handle(countedSaga, { type: 'Inc', key })));
      const saga = await read(key);
      expect([saga.count, saga.version, saga.revision, saga.stamp.edits]).toEqual([n, n, n, n]);
      // The conflicts really happened on PostgreSQL (parallel reads of version 0); SQLite may serialise them.
      if (dialect === 'postgresql') expect(results.some((r) => r.conflicts > 0)).toBe(true);
    });

    it('units of several sagas written in one group: one revision each', async () => {
      const runtime = runtimeOf();
      const keys = await Promise.all(Array.from({ length: 8 }, () => started(runtime, 'group')));
      await Promise.all(keys.map((key) => runtime.handle(countedSaga, { type: 'Inc', key })));
      await Promise.all(keys.map((key) => runtime.handle(countedSaga, { type: 'Inc', key })));
      const sagas = await Promise.all(keys.map(read));
      expect(sagas.map((s) => [s.revision, s.stamp.edits, s.version])).toEqual(keys.map(() => [2, 2, 2]));
    });

    it('without group commit too', async () => {
      const runtime = runtimeOf({ groupCommit: false });
      const key = await started(runtime, 'solo');
      await runtime.handle(countedSaga, { type: 'Inc', key });
      await runtime.handle(countedSaga, { type: 'Inc', key });
      const saga = await read(key);
      expect([saga.revision, saga.stamp.edits, saga.version]).toEqual([2, 2, 2]);
    });

    it('a timer fired by the dispatcher runs onUpdate once', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = runtimeOf({ clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false } });
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const key = await started(runtime, 'timer');
      await runtime.handle(countedSaga, { type: 'Schedule', key });
      // Schedule changed no column (a timer only): the row is guarded, not updated.
      expect((await read(key)).revision).toBe(0);
      calls.delete(key);
      clock.advance(1_000);
      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1 });
      const saga = await read(key);
      expect([saga.count, saga.revision, saga.stamp.edits, saga.version]).toEqual([1, 1, 1, 1]);
    });

    it('a step that assigns the onUpdate property itself gets onUpdate applied once on top', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'assign');
      await runtime.handle(countedSaga, { type: 'SetRevision', key, revision: 40 });
      const saga = await read(key);
      expect([saga.revision, saga.stamp.edits]).toEqual([41, 1]);
    });

    it('a replaced embeddable, and a nullable one set and cleared', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'embed');
      await runtime.handle(countedSaga, { type: 'NewStamp', key });
      expect([(await read(key)).revision, (await read(key)).stamp.edits]).toEqual([1, 11]);
      await runtime.handle(countedSaga, { type: 'Extra', key, on: true });
      let saga = await read(key);
      expect([saga.revision, saga.stamp.edits, saga.extra?.edits]).toEqual([2, 12, 6]);
      await runtime.handle(countedSaga, { type: 'Inc', key });
      saga = await read(key);
      expect([saga.revision, saga.stamp.edits, saga.extra?.edits]).toEqual([3, 13, 7]);
      await runtime.handle(countedSaga, { type: 'Extra', key, on: false });
      saga = await read(key);
      expect([saga.revision, saga.stamp.edits, saga.extra]).toEqual([4, 14, null]);
    });

    // MikroORM lists an inline embeddable's properties on the owner's metadata too, flattened (`stamp_edits`,
    // `extra_edits`), with its `onUpdate` copied: the state must not gain own properties of those names (hooks and
    // subscribers of the flush would see keys that are not its class's).
    it('computeChangeSetsOnce leaves the state’s own properties as they were', async () => {
      const runtime = runtimeOf();
      const key = await started(runtime, 'keys');
      const em = db().orm.em.fork();
      const saga = await em.findOneOrFail(CountedSaga, { key });
      const before = Object.keys(saga).sort();
      saga.count++;
      computeChangeSetsOnce(em, saga);
      expect([saga.revision, saga.stamp.edits]).toEqual([0, 0]);
      expect(Object.keys(saga).sort()).toEqual(before);
    });

    it('a unit that MikroORM’s flush writes (JSON) runs onUpdate as often as one of plain columns', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [revisedSaga] });
      const plain = uniqueKey('plain');
      const json = uniqueKey('json');
      await runtime.handle(revisedSaga, { type: 'Start', key: plain });
      await runtime.handle(revisedSaga, { type: 'Start', key: json });
      await runtime.handle(revisedSaga, { type: 'Inc', key: plain });
      await runtime.handle(revisedSaga, { type: 'Tag', key: json, tag: 'a' });
      const [a, b] = [await readRevised(plain), await readRevised(json)];
      expect([a.version, b.version]).toEqual([1, 1]);
      expect(b.revision).toBe(a.revision);
    });

    it('leaves an entity with an onUpdate property to MikroORM’s flush, before computing its change set', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [revisedSaga] });
      const key = uniqueKey('probe');
      await runtime.handle(revisedSaga, { type: 'Start', key });
      const em = db().orm.em.fork();
      const saga = await em.findOneOrFail(RevisedSaga, { key });
      saga.count = 5;
      expect(plainRowUpdate(em, em.getMetadata().find(RevisedSaga as never)!, saga)).toBeUndefined();
      expect(saga.revision).toBe(0);
    });

    // The step phase (run-step.ts) computes the change set to see what changed, and the flush computes it again:
    // only the flush may run onUpdate.
    it('runs onUpdate once per unit of work, as a plain MikroORM flush', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [revisedSaga] });
      const key = uniqueKey('once');
      await runtime.handle(revisedSaga, { type: 'Start', key });
      await runtime.handle(revisedSaga, { type: 'Inc', key });
      expect((await readRevised(key)).revision).toBe(1);
      await runtime.handle(revisedSaga, { type: 'Inc', key });
      await runtime.handle(revisedSaga, { type: 'Tag', key, tag: 'a' });
      const saga = await readRevised(key);
      expect([saga.count, saga.data.tags, saga.revision, saga.audit.edits, saga.version]).toEqual([2, ['a'], 3, 3, 3]);
    });
  });
}
