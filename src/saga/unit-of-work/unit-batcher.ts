/** What one item of a batch came to: a value, or the error that item alone failed with. */
export type ItemOutcome<R> = { readonly ok: true; readonly value: R } | { readonly ok: false; readonly error: unknown };

/** How {@link UnitBatcher} forms batches. */
export interface BatchLimits {
  /** Most items in one batch. */
  readonly maxItems: number;
  /** Most batches written at once; items arriving while that many run wait for the next batch. */
  readonly maxBatches: number;
}

interface Waiting<T, R> {
  readonly item: T;
  readonly resolve: (value: R) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Gathers items that reach the same point together into batches, as a database groups commits: an item that
 * arrives while fewer than `maxBatches` batches run goes out at once (with the items queued in the same tick),
 * so one caller alone waits no longer than without batching; items arriving while `maxBatches` batches run go
 * out together in the next, up to `maxItems` each. Each item learns its own outcome, all of them when its batch
 * is done; a batch that throws fails every item it carried with that error.
 */
export class UnitBatcher<T, R> {
  private queued: Waiting<T, R>[] = [];
  private running = 0;
  private scheduled = false;

  /** @param writeBatch writes the items of one batch; returns one outcome per item, in their order. */
  constructor(
    private readonly writeBatch: (items: readonly T[]) => Promise<readonly ItemOutcome<R>[]>,
    private readonly limits: BatchLimits,
  ) {}

  /** Batches currently being written. */
  get inFlight(): number {
    return this.running;
  }

  /** Writes `item` in the next batch; settles with its own outcome once that batch is done. */
  submit(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queued.push({ item, resolve, reject });
      this.schedule();
    });
  }

  /** Starts a batch after the current tick (so the items of one tick go together) when a slot is free. */
  private schedule(): void {
    if (this.scheduled || this.running >= this.limits.maxBatches || this.queued.length === 0) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.startBatches();
    });
  }

  private startBatches(): void {
    while (this.running < this.limits.maxBatches && this.queued.length > 0) {
      const batch = this.queued.splice(0, this.limits.maxItems);
      this.running++;
      void this.write(batch).finally(() => {
        this.running--;
        this.schedule();
      });
    }
  }

  private async write(batch: readonly Waiting<T, R>[]): Promise<void> {
    let outcomes: readonly ItemOutcome<R>[];
    try {
      outcomes = await this.writeBatch(batch.map((waiting) => waiting.item));
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
      return;
    }
    batch.forEach((waiting, index) => {
      const outcome = outcomes[index];
      if (outcome?.ok) waiting.resolve(outcome.value);
      else waiting.reject(outcome ? outcome.error : new Error('the batch returned no outcome for this item'));
    });
  }
}
