// A GPT-2 style decoder block in the nn dialect, as the ONNX front end will
// import and raise it: token embedding, pre-norm causal self-attention with
// fused QKV, a GELU MLP, and the LM head. Batch 2, sequence 8, hidden 64,
// 4 heads of 16, vocabulary 128.
//
// The weights are dense_resource references; their bytes are not needed
// before the program runs, so this file carries none.

func.func @gpt_block(%ids: tensor<2x8xi64>) -> tensor<2x8x128xf32> {
  %wte = nn.constant dense_resource<wte> : tensor<128x64xf32>
  %ln1_g = nn.constant dense_resource<ln1_g> : tensor<64xf32>
  %ln1_b = nn.constant dense_resource<ln1_b> : tensor<64xf32>
  %w_qkv = nn.constant dense_resource<w_qkv> : tensor<64x192xf32>
  %b_qkv = nn.constant dense_resource<b_qkv> : tensor<192xf32>
  %w_o = nn.constant dense_resource<w_o> : tensor<64x64xf32>
  %b_o = nn.constant dense_resource<b_o> : tensor<64xf32>
  %ln2_g = nn.constant dense_resource<ln2_g> : tensor<64xf32>
  %ln2_b = nn.constant dense_resource<ln2_b> : tensor<64xf32>
  %w_up = nn.constant dense_resource<w_up> : tensor<64x256xf32>
  %b_up = nn.constant dense_resource<b_up> : tensor<256xf32>
  %w_down = nn.constant dense_resource<w_down> : tensor<256x64xf32>
  %b_down = nn.constant dense_resource<b_down> : tensor<64xf32>
  %w_head = nn.constant dense_resource<w_head> : tensor<64x128xf32>

  %x = nn.embedding %wte, %ids : (tensor<128x64xf32>, tensor<2x8xi64>) -> tensor<2x8x64xf32>

  // Attention.
  %h = nn.layer_norm %x scale(%ln1_g : tensor<64xf32>) bias(%ln1_b : tensor<64xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x8x64xf32>
  %qkv = nn.matmul %h, %w_qkv bias %b_qkv : (tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<192xf32>) -> tensor<2x8x192xf32>
  %q, %k, %v = nn.split %qkv axis = 2 : tensor<2x8x192xf32> -> tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  %q4 = nn.reshape %q : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %k4 = nn.reshape %k : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %v4 = nn.reshape %v : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %qh = nn.transpose %q4 permutation = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %kh = nn.transpose %k4 permutation = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %vh = nn.transpose %v4 permutation = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %a = nn.attention %qh, %kh, %vh {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %at = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  %am = nn.reshape %at : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  %o = nn.matmul %am, %w_o bias %b_o : (tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %x1 = nn.add %x, %o : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>

  // MLP.
  %h2 = nn.layer_norm %x1 scale(%ln2_g : tensor<64xf32>) bias(%ln2_b : tensor<64xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x8x64xf32>
  %up = nn.matmul %h2, %w_up bias %b_up : (tensor<2x8x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x8x256xf32>
  %act = nn.gelu %up approximation = tanh : tensor<2x8x256xf32>
  %down = nn.matmul %act, %w_down bias %b_down : (tensor<2x8x256xf32>, tensor<256x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %x2 = nn.add %x1, %down : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>

  %logits = nn.matmul %x2, %w_head : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x128xf32>
  return %logits : tensor<2x8x128xf32>
}
