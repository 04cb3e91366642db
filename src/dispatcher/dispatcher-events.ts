import type { DispatchPassResult } from '../contracts.js';
import type { DispatchTable } from '../sql/dispatch-tables.js';
import { describeError } from '../telemetry/describe-error.js';
import type { SagaLogger } from '../telemetry/logger.js';
import type { LeaseRenewal } from './lease-keeper.js';

/** Events a dispatcher reports (see {@link SagaDispatcher.on}). */
export interface DispatcherEvents {
  /** Rows were claimed: which, and until when the claim is exclusive. */
  claimed: (claim: {
    readonly table: DispatchTable;
    readonly ids: readonly string[];
    readonly at: Date;
    readonly leaseUntil: Date;
  }) => void;
  /** The leases of held rows (waiting or being delivered) were extended; `lost` ones were taken over. */
  renewed: (renewal: LeaseRenewal) => void;
  /** A pass of the loop finished: its deliveries all ended. */
  pass: (result: DispatchPassResult) => void;
  /**
   * A pass found nothing due, and the loop now waits `pollIntervalMs` (moving a fake clock past it wakes the loop), or
   * less when this process commits rows due at once. Deliveries of earlier passes it overtook may still be in flight:
   * `drained` says when none is.
   */
  idle: () => void;
  /**
   * The loop waits (as for `idle`) with nothing left in flight: no pass, delivery or published stamp. Emitted once per
   * wait, when the last of them ends (or with `idle` when none was left).
   */
  drained: () => void;
  /**
   * The loop's connection of its own LISTENs for the commits of other processes (PostgreSQL, the `listen` option):
   * emitted when the loop starts listening, and again each time it listens after the connection was lost.
   */
  listening: () => void;
  /**
   * A pass failed as a whole (usually the database is unreachable); the loop now waits and then tries again.
   * The error is a `SagaDispatchError` whose `result` says what the pass did first.
   */
  passFailed: (error: unknown, consecutiveFailures: number) => void;
}

/** The listeners of a dispatcher's events. A listener that throws is logged; the others still hear the event. */
export class DispatcherEventListeners {
  private readonly listeners: { [K in keyof DispatcherEvents]: Set<DispatcherEvents[K]> } = {
    claimed: new Set(),
    renewed: new Set(),
    pass: new Set(),
    idle: new Set(),
    drained: new Set(),
    listening: new Set(),
    passFailed: new Set(),
  };

  constructor(private readonly logger: SagaLogger) {}

  /** Subscribes to an event; returns the unsubscribe function. */
  on<K extends keyof DispatcherEvents>(event: K, listener: DispatcherEvents[K]): () => void {
    this.listeners[event].add(listener);
    return () => this.listeners[event].delete(listener);
  }

  emit<K extends keyof DispatcherEvents>(event: K, ...args: Parameters<DispatcherEvents[K]>): void {
    for (const listener of this.listeners[event]) {
      try {
        (listener as (...a: Parameters<DispatcherEvents[K]>) => void)(...args);
      } catch (error) {
        this.logger.warn('a dispatcher event listener threw; the dispatcher goes on', { event, error: describeError(error) });
      }
    }
  }
}
