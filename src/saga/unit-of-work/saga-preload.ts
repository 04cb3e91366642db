import type { EntityData, EntityManager } from '@mikro-orm/core';
import { findRowsByPrimaryKey, freshFork, readsRowsDirectly } from '../../orm/index.js';
import type { RegisteredSaga } from '../registered-saga.js';

/** Most ids in one preload query (SQLite's bound-parameter limit is 999 on old builds). */
const PRELOAD_CHUNK = 500;

/** The timer rows a preload reads the sagas of. */
export interface PreloadTarget {
  readonly sagaType: string;
  readonly sagaId: string;
}

/**
 * The saga rows of a claimed timer batch, read with one query per saga type instead of one per delivery.
 * Phase 1 of a delivery's first attempt takes its saga's row from here (once: the first delivery of a saga in
 * the batch, the head of its lane, takes it; later deliveries of that saga read their own row, so they see the
 * earlier ones' writes). A row may be stale by the time it is taken (another unit of work committed meanwhile):
 * the write phase's `WHERE version = ?` then finds the newer version, the unit of work rolls back and its retry
 * reads the row afresh. Nothing is decided from a row's absence: a saga not found here is read by the unit.
 * A failed read leaves the preload empty (every unit reads its own row, and meets the failure itself).
 */
export class SagaPreload {
  private constructor(private readonly rows: Promise<Map<string, EntityData<object>>>) {}

  /** A preload with no rows (nothing to read, or the sagas' filters forbid reading them past `em.findOne`). */
  static readonly EMPTY = new SagaPreload(Promise.resolve(new Map()));

  /**
   * Starts reading the saga rows of `targets` on a fresh fork of `em`; does not wait for them. Saga types
   * `sagaOf` does not know, and entities with filters (`em.findOne` applies them, this read would not), are
   * left to the units of work.
   */
  static read(em: EntityManager, sagaOf: (sagaType: string) => RegisteredSaga | undefined, targets: readonly PreloadTarget[]): SagaPreload {
    const idsByType = new Map<string, Set<string>>();
    for (const { sagaType, sagaId } of targets) {
      const ids = idsByType.get(sagaType) ?? new Set<string>();
      ids.add(sagaId);
      idsByType.set(sagaType, ids);
    }
    const fork = freshFork(em);
    const reads: Promise<[string, EntityData<object>][]>[] = [];
    for (const [sagaType, ids] of idsByType) {
      const saga = sagaOf(sagaType);
      if (!saga) continue;
      const pk = saga.meta.primaryKeys[0]!;
      const all = [...ids];
      const read = async (): Promise<[string, EntityData<object>][]> => {
        // Filters (the entity's, the configuration's or the EntityManager's own) are checked where em.findOne
        // would apply them; a saga type they may hide is left to the units of work.
        if (!(await readsRowsDirectly(fork, saga.meta))) return [];
        const chunks: Promise<EntityData<object>[]>[] = [];
        for (let i = 0; i < all.length; i += PRELOAD_CHUNK)
          chunks.push(findRowsByPrimaryKey(fork, saga.meta, all.slice(i, i + PRELOAD_CHUNK)));
        return (await Promise.all(chunks))
          .flat()
          .map((row): [string, EntityData<object>] => [keyOf(sagaType, String((row as Record<string, unknown>)[pk])), row]);
      };
      reads.push(read());
    }
    if (reads.length === 0) return SagaPreload.EMPTY;
    // An optimisation only: a failed read is met again, and reported, by the units of work reading their own rows.
    const rows = Promise.all(reads).then(
      (lists) => new Map(lists.flat()),
      () => new Map<string, EntityData<object>>(),
    );
    return new SagaPreload(rows);
  }

  /** The row of saga `sagaType/sagaId` if it was read and not taken yet; it is then gone from the preload. */
  async take(sagaType: string, sagaId: string): Promise<EntityData<object> | undefined> {
    const rows = await this.rows;
    const key = keyOf(sagaType, sagaId);
    const row = rows.get(key);
    rows.delete(key);
    return row;
  }
}

function keyOf(sagaType: string, sagaId: string): string {
  return `${sagaType}\u0000${sagaId}`;
}
