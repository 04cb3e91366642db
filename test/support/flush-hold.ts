import type { EventSubscriber, FlushEventArgs } from '@mikro-orm/core';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { deferred } from './suite.js';

/** Holds the flush of the unit of work on the ScriptedSaga with a given key (inside its group transaction) until released. */
export class FlushHold implements EventSubscriber {
  private readonly holds = new Map<string, { reached: ReturnType<typeof deferred<void>>; release: ReturnType<typeof deferred<void>> }>();
  arm(key: string) {
    const hold = { reached: deferred(), release: deferred() };
    this.holds.set(key, hold);
    return hold;
  }
  async beforeFlush(args: FlushEventArgs): Promise<void> {
    for (const entity of args.uow.getIdentityMap().values()) {
      const hold = entity instanceof ScriptedSaga ? this.holds.get(entity.key) : undefined;
      if (!hold) continue;
      this.holds.delete((entity as ScriptedSaga).key);
      hold.reached.resolve();
      await hold.release.promise;
    }
  }
}

/** Lets every continuation queued now run (the units released by a gate reach their write phase; no I/O between). */
export const drainContinuations = () => new Promise<void>((resolve) => setImmediate(resolve));
