/** Which timers a step-changing unit of work cancels. */
export const TIMER_SCOPES = {
  /** Cancelled automatically when the saga moves to another step (needs `stepProperty`). */
  STEP: 'step',
  /** Lives until it fires, is cancelled or the saga completes. */
  SAGA: 'saga',
} as const;
/** Which timers a step-changing unit of work cancels. */
export type TimerScope = (typeof TIMER_SCOPES)[keyof typeof TIMER_SCOPES];

/** A timer a step asked for, validated and with its due date computed. */
export interface PlannedTimer {
  readonly name: string;
  readonly dueAt: Date;
  readonly messageType: string;
  /** The message as JSON text (validated to round-trip). */
  readonly payloadJson: string;
  readonly calendarKey: string | null;
  readonly scope: TimerScope;
}

/**
 * The timer changes one step asked for, folded in call order: the last call for a name wins, and
 * `cancelAll()` drops what was planned before it.
 */
export class TimerPlan {
  private cancelAllPending = false;
  private readonly byName = new Map<string, PlannedTimer | null>();

  schedule(timer: PlannedTimer): void {
    this.byName.set(timer.name, timer);
  }

  cancel(name: string): void {
    this.byName.set(name, null);
  }

  cancelAll(): void {
    this.cancelAllPending = true;
    this.byName.clear();
  }

  /** Whether every pending timer of the instance is to be deleted before the scheduled ones are written. */
  get cancelsAll(): boolean {
    return this.cancelAllPending;
  }

  /** Names to delete (only meaningful when not {@link cancelsAll}). */
  get cancelled(): string[] {
    return [...this.byName].filter(([, timer]) => timer === null).map(([name]) => name);
  }

  /** Timers to write, replacing a pending timer of the same name. */
  get scheduled(): PlannedTimer[] {
    return [...this.byName.values()].filter((timer): timer is PlannedTimer => timer !== null);
  }

  get isEmpty(): boolean {
    return !this.cancelAllPending && this.byName.size === 0;
  }
}
