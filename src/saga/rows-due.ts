import { DISPATCH_TABLES, type DispatchTable } from '../sql/dispatch-tables.js';
import type { UnitOfWorkPlan } from './unit-of-work/unit-of-work-plan.js';

/** Hears that a committed unit of work wrote rows of `table` due at once. */
export type RowsDueListener = (table: DispatchTable) => void;

/** Wakes the dispatchers of other processes (`DispatcherNotifier`). */
export interface OtherDispatchers {
  rowsDue(): void;
}

/**
 * Tells the dispatchers running in this process on the same runtime that a unit of work committed rows due at
 * once (an outbox message, a timer due now), so an idle loop claims them now rather than at its next poll; and,
 * through `others` (PostgreSQL's NOTIFY), the dispatchers of other processes that listen.
 */
export class RowsDue {
  private readonly listeners = new Set<RowsDueListener>();

  /** @param others wakes the dispatchers of other processes; none: they find the rows by polling. */
  constructor(private readonly others?: OtherDispatchers) {}

  /** Subscribes; returns the unsubscribe function. */
  on(listener: RowsDueListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Called once a unit's write of `plan` committed at `now`. */
  committed(plan: UnitOfWorkPlan, now: Date): void {
    if (this.listeners.size === 0 && !this.others) return;
    const { outbox, timers } = rowsDueAtOnce(plan, now);
    if (outbox || timers) this.others?.rowsDue();
    if (outbox) this.notify(DISPATCH_TABLES.outbox);
    if (timers) this.notify(DISPATCH_TABLES.timer);
  }

  private notify(table: DispatchTable): void {
    for (const listener of this.listeners) listener(table);
  }
}

/** Which dispatch tables `plan`, written at `now`, writes rows of that are due at once: outbox rows, timers due by `now`. */
export function rowsDueAtOnce(plan: UnitOfWorkPlan, now: Date): { readonly outbox: boolean; readonly timers: boolean } {
  return { outbox: plan.outbox.length > 0, timers: plan.timers.some((timer) => timer.dueAt.getTime() <= now.getTime()) };
}
