// A claimed timer batch reads its sagas with one query (src/saga/unit-of-work/saga-preload.ts), on every database:
// the first delivery of each saga takes its row from there. These tests pin what that must not change: a row
// changed after the batch read is never written over, two timers of one saga both apply, and the state a step
// sees (custom types, JSON, Date, bigint, enum, embeddable) is what `em.findOne` would have given it.
import { BigIntType, defineEntity, type Platform, Type } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { claimDueTimers } from '../../src/dispatcher/claim-due-rows.js';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, SagaTimer, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { Address } from '../fixtures/column-type-sagas.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/**
 * A user-defined type: the text is stored reversed. A row hydrated without converting it would read back
 * reversed, and its next flush would see a change.
 */
class ReversedTextType extends Type<string | null, string | null> {
  override convertToDatabaseValue(value: string | null): string | null {
    return value === null ? null : [...value].reverse().join('');
  }
  override convertToJSValue(value: string | null): string | null {
    return value === null ? null : [...value].reverse().join('');
  }
  override getColumnType(_prop: unknown, _platform: Platform): string {
    return 'text';
  }
}

const PRIORITIES = ['low', 'high'] as const;

/** A saga state with one property of each kind of type a user may map. */
class RichSaga extends SagaState {
  key!: string;
  counter: number = 0;
  code: string | null = null;
  doc: Record<string, unknown> | null = null;
  seenAt: Date | null = null;
  total: bigint | null = null;
  priority: (typeof PRIORITIES)[number] = 'low';
  flag: boolean = false;
  ratio: number = 0;
  address: Address | null = null;
}

const RichSagaSchema = defineEntity({
  class: RichSaga,
  extends: SagaStateSchema,
  tableName: 'rich_preload_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    counter: { type: 'integer', fieldName: 'counter' },
    code: { type: ReversedTextType, fieldName: 'code', nullable: true },
    doc: { type: 'json', fieldName: 'doc', nullable: true },
    seenAt: { type: Date, fieldName: 'seen_at', nullable: true },
    total: { type: new BigIntType('bigint'), fieldName: 'total', nullable: true },
    priority: { enum: true, items: () => [...PRIORITIES], fieldName: 'priority' },
    flag: { type: 'boolean', fieldName: 'flag' },
    ratio: { type: 'double', fieldName: 'ratio' },
    address: { kind: 'embedded', entity: () => Address, nullable: true },
  },
});

/** A saga state whose entity has a default filter: `em.findOne` does not see an archived instance. */
class FilteredSaga extends SagaState {
  key!: string;
  archived: boolean = false;
  ticks: number = 0;
}

const FilteredSagaSchema = defineEntity({
  class: FilteredSaga,
  extends: SagaStateSchema,
  tableName: 'filtered_preload_saga',
  filters: { active: { name: 'active', cond: { archived: false }, default: true } },
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    archived: { type: 'boolean', fieldName: 'archived' },
    ticks: { type: 'integer', fieldName: 'ticks' },
  },
});

const filteredSaga = defineSaga<FilteredSaga, { readonly type: 'Start'; readonly key: string } | { readonly type: 'Tick' }>({
  name: 'filtered-preload',
  state: FilteredSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(_saga, _message, ctx) {
      ctx.schedule('tick', 0, { type: 'Tick' });
    },
    Tick(saga) {
      saga.ticks++;
    },
  },
});

type RichMessage =
  | { readonly type: 'Start'; readonly key: string; readonly set: Partial<RichSaga>; readonly timers: readonly string[] }
  | { readonly type: 'Bump' }
  | { readonly type: 'Look' };

const richSaga = defineSaga<RichSaga, RichMessage>({
  name: 'rich-preload',
  state: RichSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(saga, message, ctx) {
      Object.assign(saga, message.set);
      for (const name of message.timers) ctx.schedule(name, 0, name === 'look' ? { type: 'Look' } : { type: 'Bump' });
    },
    Bump(saga) {
      saga.counter++;
    },
    // Changes nothing: a state that hydrated differently from what the snapshot holds would bump the version.
    Look() {},
  },
});

/** The rich values as one would compare them (a Date by its time, a BigInt as text). */
const valuesOf = (saga: RichSaga) => ({
  code: saga.code,
  doc: saga.doc,
  seenAt: saga.seenAt?.toISOString() ?? null,
  total: saga.total === null ? null : String(saga.total),
  priority: saga.priority,
  flag: saga.flag,
  ratio: saga.ratio,
  address: saga.address ? { street: saga.address.street, number: saga.address.number ?? null } : null,
});

for (const dialect of DIALECTS) {
  describe(`timer batch preload (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, RichSagaSchema, FilteredSagaSchema]);
    const dispatchers: SagaDispatcher[] = [];
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
    });
    const setup = async () => {
      // Each test sees only its own timers.
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const clock = new FakeClock('2026-02-02T10:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga, richSaga, filteredSaga], clock });
      return { clock, runtime, rows: rowsOf(db().orm) };
    };
    const claim = async (runtime: SagaRuntime, clock: FakeClock) =>
      (await claimDueTimers(runtime.context, clock.now(), new Date(clock.now().getTime() + 60_000), 10)).rows;

    it('a saga changed between the batch read and its delivery is not written over: the delivery retries on the new row', async () => {
      const { clock, runtime, rows } = await setup();
      const key = uniqueKey('stale');
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'late', after: 1_000 }] });
      clock.advance({ seconds: 1 });
      const [timer] = await claim(runtime, clock);
      const preload = runtime.preloadTimerSagas([timer!]);
      // Resolves once the batch read is done (no saga has this id): the row below is read before the change.
      expect(await preload.take(scriptedSaga.name, 'not-a-saga')).toBeUndefined();
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'meanwhile' }] });

      const result = await runtime.deliverTimer(timer!, preload);

      // The first attempt ran on the preloaded version 1, met version 2 at its write and was retried.
      expect(result).toMatchObject({ outcome: 'handled', version: 2, conflicts: 1 });
      expect(await rows.saga(key)).toMatchObject({ version: 2, log: 'started;meanwhile;tick:late;' });
      expect((await rows.timers({ name: 'late', sagaId: timer!.sagaId }))[0]).toMatchObject({ outcome: 'fired' });
    });

    it('two timers of one saga in one batch both apply, the second on the first one’s write', async () => {
      const { clock, runtime, rows } = await setup();
      const key = uniqueKey('pair');
      await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [
          { op: 'schedule', name: 'first', after: 1_000 },
          { op: 'schedule', name: 'second', after: 1_000 },
        ],
      });
      clock.advance({ seconds: 1 });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, batchSize: 10, concurrency: 4 });
      dispatchers.push(dispatcher);

      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 2, fired: 2, stale: 0, failed: 0 });

      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ version: 2 });
      expect(saga!.log).toMatch(/^started;tick:(first;tick:second|second;tick:first);$/);
      // Only the lane head took the preloaded row: the second delivery read the row the first one wrote.
      expect(runtime.stats().concurrencyConflicts).toBe(0);
    });

    it('a preloaded row hydrates as em.findOne would: custom type, JSON, Date, bigint, enum, boolean, double, embeddable', async () => {
      const { clock, runtime } = await setup();
      const key = uniqueKey('rich');
      const set: Partial<RichSaga> = {
        code: 'abc',
        doc: { nested: { list: [1, 'two', null] }, unicode: 'Grüße 😀' },
        seenAt: new Date('2025-12-31T23:59:59.123Z'),
        total: 9_007_199_254_740_991n,
        priority: 'high',
        flag: true,
        ratio: 0.1,
        address: Object.assign(new Address(), { street: 'Main', number: 7 }),
      };
      const started = await runtime.handle(richSaga, { type: 'Start', key, set, timers: ['look', 'bump'] });
      const read = async () => (await db().orm.em.fork({ clear: true }).findOneOrFail(RichSaga, { key })) as RichSaga;
      const before = valuesOf(await read());
      clock.advance({ seconds: 1 });
      const timers = await claim(runtime, clock);
      expect(timers.map((t) => t.name).sort()).toEqual(['bump', 'look']);
      const look = timers.find((t) => t.name === 'look')!;
      const bump = timers.find((t) => t.name === 'bump')!;

      const probe = runtime.preloadTimerSagas([look]);
      expect(await probe.take(richSaga.name, started.sagaId!), 'the batch read finds the row').toBeDefined();

      // A step that changes nothing on the preloaded row writes no new version: the row hydrated as it was read.
      const lookPreload = runtime.preloadTimerSagas([look]);
      expect(await runtime.deliverTimer(look, lookPreload)).toMatchObject({ outcome: 'handled', version: 0, conflicts: 0, changed: false });
      expect(await lookPreload.take(richSaga.name, started.sagaId!), 'the delivery took the preloaded row').toBeUndefined();

      // A step that changes one property writes it alone: every other value reads back as it was.
      const bumpPreload = runtime.preloadTimerSagas([bump]);
      expect(await runtime.deliverTimer(bump, bumpPreload)).toMatchObject({ outcome: 'handled', version: 1, conflicts: 0, changed: true });
      const after = await read();
      expect(after).toMatchObject({ version: 1, counter: 1 });
      expect(valuesOf(after)).toEqual(before);
      expect(before).toMatchObject({ code: 'abc', total: '9007199254740991', priority: 'high', ratio: 0.1 });
    });

    it('a saga entity with a filter is not read ahead: its timer sees what em.findOne sees (an archived instance is gone)', async () => {
      const { clock, runtime } = await setup();
      const key = uniqueKey('filtered');
      const { sagaId } = await runtime.handle(filteredSaga, { type: 'Start', key });
      await db().orm.em.fork().nativeUpdate(FilteredSaga, { key }, { archived: true }, { filters: false });
      clock.advance({ seconds: 1 });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger });
      dispatchers.push(dispatcher);

      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 0, stale: 1 });

      // The filter hid the instance from the delivery, as it would without the batch read: no step ran.
      const row = await db().orm.em.fork().findOneOrFail(FilteredSaga, { id: sagaId! }, { filters: false });
      expect(row).toMatchObject({ archived: true, ticks: 0, version: 0 });
      expect((await db().orm.em.fork().find(SagaTimer, { sagaId: sagaId! }))[0]).toMatchObject({ outcome: 'discarded' });
    });
  });
}
