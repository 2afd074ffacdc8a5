// RUN: partita-opt %s -split-input-file -verify-diagnostics --partita-verify-pipeline

// Both stages receive first: neither send is ever reached.
dist.mesh @mesh [pp = 2]
func.func @both_receive_first(%x: tensor<4xf32>) {
  dist.stage 0 on @mesh axis pp {
    // expected-error @+1 {{pipeline deadlock: stage 0 waits here to receive from stage 1 (tag 1), which never reaches a matching send}}
    %a = dist.recv on @mesh axis pp from 1 tag 1 : tensor<4xf32>
    dist.send %x on @mesh axis pp to 1 tag 0 : tensor<4xf32>
    dist.yield
  }
  dist.stage 1 on @mesh axis pp {
    // expected-error @+1 {{pipeline deadlock: stage 1 waits here to receive from stage 0 (tag 0), which never reaches a matching send}}
    %b = dist.recv on @mesh axis pp from 0 tag 0 : tensor<4xf32>
    dist.send %x on @mesh axis pp to 0 tag 1 : tensor<4xf32>
    dist.yield
  }
  return
}

// -----

// Microbatches sent in one order and received in the other.
dist.mesh @mesh [pp = 2]
func.func @crossed_tags(%x: tensor<4xf32>) {
  dist.stage 0 on @mesh axis pp {
    // expected-error @+1 {{pipeline deadlock: stage 0 waits here to send to stage 1 (tag 0), which never reaches a matching receive}}
    dist.send %x on @mesh axis pp to 1 tag 0 : tensor<4xf32>
    dist.send %x on @mesh axis pp to 1 tag 1 : tensor<4xf32>
    dist.yield
  }
  dist.stage 1 on @mesh axis pp {
    // expected-error @+1 {{pipeline deadlock: stage 1 waits here to receive from stage 0 (tag 1), which never reaches a matching send}}
    %b = dist.recv on @mesh axis pp from 0 tag 1 : tensor<4xf32>
    %c = dist.recv on @mesh axis pp from 0 tag 0 : tensor<4xf32>
    dist.yield
  }
  return
}

// -----

// A well-formed schedule passes: stage 1 relays to stage 2.
dist.mesh @mesh [pp = 3]
func.func @relay(%x: tensor<4xf32>) {
  dist.stage 0 on @mesh axis pp {
    dist.send %x on @mesh axis pp to 1 tag 0 : tensor<4xf32>
    dist.yield
  }
  dist.stage 1 on @mesh axis pp {
    %a = dist.recv on @mesh axis pp from 0 tag 0 : tensor<4xf32>
    dist.send %a on @mesh axis pp to 2 tag 1 : tensor<4xf32>
    dist.yield
  }
  dist.stage 2 on @mesh axis pp {
    %b = dist.recv on @mesh axis pp from 1 tag 1 : tensor<4xf32>
    dist.yield
  }
  return
}
