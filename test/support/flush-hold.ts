import type { EventSubscriber, FlushEventArgs } from '@mikro-orm/core';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { deferred } from './suite.js';

/** Holds the flush of the unit of work on the ScriptedSaga with a given key (inside its transaction) until released. */
export class FlushHold implements EventSubscriber {
  private readonly holds = new Map<
    string,
    { skip: number; reached: ReturnType<typeof deferred<void>>; release: ReturnType<typeof deferred<void>> }
  >();
  /** Holds the next flush of the saga with `key`, or the one after `skip` others. */
  arm(key: string, skip = 0) {
    const hold = { skip, reached: deferred(), release: deferred() };
    this.holds.set(key, hold);
    return hold;
  }
  async beforeFlush(args: FlushEventArgs): Promise<void> {
    for (const entity of args.uow.getIdentityMap().values()) {
      const hold = entity instanceof ScriptedSaga ? this.holds.get(entity.key) : undefined;
      if (!hold) continue;
      if (hold.skip-- > 0) continue;
      this.holds.delete((entity as ScriptedSaga).key);
      hold.reached.resolve();
      await hold.release.promise;
    }
  }
}

/** Lets every continuation queued now run (the units released by a gate reach their write phase; no I/O between). */
export const drainContinuations = () => new Promise<void>((resolve) => setImmediate(resolve));
